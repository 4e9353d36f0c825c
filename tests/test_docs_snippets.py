"""The commands in the docs are tests: every shell and Python block runs, or says why it does not.

Every fenced block of ``README.md``, ``packages/*/README.md`` and ``docs/*.md`` is one of:

- a command, ```` ```bash ```` (also ``sh``, ``shell``) or ```` ```python ```` (also ``py``):
  run here, in the order of its document, and a block that fails fails this test, naming the
  file, the line of its fence and the tail of what it printed;
- a command that is not run, because it trains a model, needs a GPU, Docker, a server, an
  endpoint or the network, installs packages or runs for minutes: the line directly above its
  fence says so, with the reason (required, never empty)::

      <!-- docs-test: skip: trains a model (~10 min) -->

- anything else (output, a file's contents, a formula, a layout): a fence language that is not a
  command's, such as ``text``, ``json``, ``yaml``, ``toml``.

A fence without a language is an error (is it a command?), and so are a session transcript
(``console``, ``pycon``: split it into the commands and a ``text`` block of their output), a
``docs-test`` comment that is not directly above a command block, and an unknown marker.

A block written for a user's own files runs on the shipped data: the line above it may instead be
``<!-- docs-test: setup: COMMANDS -->`` (it may span lines), shell commands run in the block's
folder first, such as copying a published log (``../shared/data/real``) to the name the block
uses. The block itself runs as written.

Each document runs in its own temporary folder beside a ``shared/data/real`` that is the real
agent logs (``$KNOWLYR_REAL_DATA``), with links to the clone's ``packages``, ``examples``,
``bench``, ``scripts``, ``docs`` and ``tests``: a command written to be typed at the root of a
clone runs as written, and what it writes lands in the temporary folder, never in the clone. Shell
blocks run with ``bash -e -o pipefail``, stdin closed, the venv's ``bin`` first on ``PATH``; the
Python blocks of one document share one interpreter and its names, like a reader reading on.

    pytest tests/test_docs_snippets.py
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from knowlyrcore.testing import REAL_DATA_ENV_VAR, real_data

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = sorted(
    p.relative_to(ROOT).as_posix()
    for p in [ROOT / "README.md", *ROOT.glob("packages/*/README.md"), *ROOT.glob("docs/*.md")]
)

SHELL = frozenset({"bash", "sh", "shell"})
PYTHON = frozenset({"python", "py", "python3"})
#: transcripts mix commands and their output: neither runnable nor plainly not a command
TRANSCRIPT = frozenset({"console", "shell-session", "sh-session", "pycon"})
#: what a clone's root holds that the docs' commands name (read, never written: outputs are relative)
#: where the docs' commands read the real agent logs: beside the clone, as in the workplace's layout
DOCS_REAL_DATA = Path("..", "shared", "data", "real")
LINKED = ("packages", "examples", "bench", "scripts", "docs", "tests", "Makefile", "pyproject.toml", "conftest.py")
#: one block's limit; a block near it is no longer a cheap one: mark it skipped, with why
BLOCK_SECONDS = 120
TAIL_LINES = 40

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
MARKER = re.compile(r"<!--\s*docs-test:\s*(?P<body>.*?)\s*-->", re.DOTALL)
MARKER_START = re.compile(r"\s*<!--\s*docs-test:")


@dataclass
class Block:
    doc: str
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    skip: str | None = None  # the reason
    setup: str | None = None  # shell commands run first

    @property
    def kind(self) -> str:
        return "shell" if self.lang in SHELL else "python" if self.lang in PYTHON else "other"

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


@dataclass
class Parsed:
    blocks: list[Block] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def commands(self) -> list[Block]:
        return [b for b in self.blocks if b.kind != "other"]


def _marker_above(lines: list[str], fence_index: int) -> tuple[int, str] | None:
    """The ``<!-- ... -->`` comment ending on the line directly above the fence: (its first
    line's index, its text), or None."""
    end = fence_index - 1
    if end < 0 or not lines[end].rstrip().endswith("-->"):
        return None
    for start in range(end, -1, -1):
        if "<!--" in lines[start]:
            return start, "\n".join(lines[start : end + 1]).strip()
    return None


def _closes(match: re.Match | None, fence: str) -> bool:
    return (
        bool(match)
        and match["fence"][0] == fence[0]
        and len(match["fence"]) >= len(fence)
        and not match["info"].strip()
    )


def parse(text: str, doc: str) -> Parsed:
    """The fenced blocks of a markdown document, with their markers, and what breaks the rules."""
    lines = text.split("\n")
    parsed = Parsed()
    used_markers: set[int] = set()  # line indexes of the markers that belong to a fence
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, info = opening["indent"], opening["fence"], opening["info"].strip()
        j = i + 1  # the closing fence: the same character, at least as many, no info string
        while j < len(lines) and not _closes(FENCE.match(lines[j]), fence):
            j += 1
        body = [line[len(indent) :] if line.startswith(indent) else line.lstrip() for line in lines[i + 1 : j]]
        lang = info.split()[0].lower() if info else ""
        block = Block(doc, i + 1, lang, "\n".join(body) + "\n")
        where = block.where
        if not lang:
            parsed.errors.append(
                f"{where}: a fence without a language: ```bash or ```python for a command (run here, or "
                "marked <!-- docs-test: skip: why -->), ```text (or json, yaml, ...) for anything else"
            )
        elif lang in TRANSCRIPT:
            parsed.errors.append(
                f"{where}: ```{lang} is a session transcript: put the commands in a ```bash (or ```python) "
                "block and what they print in a ```text block"
            )
        above = _marker_above(lines, i)
        marker = MARKER.search(above[1]) if above else None
        if marker:
            used_markers.add(above[0])
            kind, _, value = marker["body"].partition(":")
            kind, value = kind.strip(), value.strip()
            if block.kind == "other":
                parsed.errors.append(
                    f"{where}: a docs-test marker on a ```{lang or '(no language)'} block, which never runs"
                )
            elif kind == "skip":
                if value:
                    block.skip = " ".join(value.split())
                else:
                    parsed.errors.append(f"{where}: a skip marker without its reason: <!-- docs-test: skip: why -->")
            elif kind == "setup":
                if value:
                    block.setup = value
                else:
                    parsed.errors.append(f"{where}: a setup marker without commands")
            else:
                parsed.errors.append(f"{where}: unknown docs-test marker {kind!r} (skip: REASON or setup: COMMANDS)")
        parsed.blocks.append(block)
        i = j + 1
    inside = {n for b in parsed.blocks for n in range(b.line - 1, b.line + b.code.count("\n") + 1)}
    for index, line in enumerate(lines):
        if index not in used_markers and index not in inside and MARKER_START.match(line):
            parsed.errors.append(
                f"{doc}:{index + 1}: a docs-test marker not directly above a ```bash or ```python fence"
            )
    return parsed


# -- running a document ---------------------------------------------------------------------------


def _tail(text: str) -> str:
    lines = text.rstrip().splitlines()
    cut = lines[-TAIL_LINES:]
    return "\n".join((["..."] if len(lines) > len(cut) else []) + ["    " + line for line in cut])


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_shell(script: str, name: str, cwd: Path, env: dict[str, str], first_line: int = 1) -> tuple[bool, str]:
    """``script`` under ``bash -e -o pipefail`` (errors name ``name`` and the document's line numbers)."""
    padded = "\n" * (first_line - 1) + script
    proc = subprocess.Popen(
        ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", padded, name],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its whole group is killed: no command outlives its block
    )
    try:
        out, _ = proc.communicate(timeout=BLOCK_SECONDS)
    except subprocess.TimeoutExpired:
        _kill(proc)
        out, _ = proc.communicate()
        return False, f"{out}\n(still running after {BLOCK_SECONDS} s: not a cheap block; mark it skipped, with why)"
    finally:
        _kill(proc)
    return proc.returncode == 0, out if proc.returncode == 0 else f"{out}\n(exit status {proc.returncode})"


#: Runs the Python blocks of one document in one namespace. Requests are JSON lines on stdin;
#: a block's output (its subprocesses' too) goes to the file it names; one JSON reply per block
#: on the original stdout.
PYTHON_DRIVER = r"""
import json, os, sys, traceback
reply = os.fdopen(os.dup(1), "w")
namespace = {"__name__": "__main__"}
for request in sys.stdin:
    request = json.loads(request)
    with open(request["log"], "w") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    ok = True
    try:
        exec(compile(request["code"], request["name"], "exec"), namespace)
    except SystemExit as stop:
        ok = stop.code in (None, 0)
    except BaseException:
        traceback.print_exc()
        ok = False
    sys.stdout.flush()
    sys.stderr.flush()
    reply.write(json.dumps({"ok": ok}) + "\n")
    reply.flush()
"""


class PythonSession:
    """One interpreter for a document's Python blocks: a later block sees an earlier one's names."""

    def __init__(self, cwd: Path, env: dict[str, str]):
        self.cwd, self.env, self.proc = cwd, env, None
        self.count = 0

    def run(self, code: str, name: str, first_line: int) -> tuple[bool, str]:
        if self.proc is None:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", PYTHON_DRIVER],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
        self.count += 1
        log = self.cwd.parent / f"python-block-{self.count}.log"
        padded = "\n" * first_line + code  # tracebacks give the document's line numbers
        self.proc.stdin.write(json.dumps({"code": padded, "name": name, "log": str(log)}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], BLOCK_SECONDS)
        answer = self.proc.stdout.readline() if ready else ""
        out = log.read_text(errors="replace") if log.exists() else ""
        if not ready:
            self.close()
            return (
                False,
                f"{out}\n(still running after {BLOCK_SECONDS} s: not a cheap block; mark it skipped, with why)",
            )
        if not answer:
            self.close()
            return False, f"{out}\n(the interpreter exited)"
        return json.loads(answer)["ok"], out

    def close(self) -> None:
        if self.proc is not None:
            _kill(self.proc)
            self.proc.communicate()
            self.proc = None


def workspace(tmp_path: Path, real_data: Path) -> Path:
    """A folder to run a document in, as if it were the clone's root: links to what the commands
    read, ``../shared/data/real`` the real agent logs; what they write stays in ``tmp_path``."""
    cwd = tmp_path / "knowlyr"
    cwd.mkdir()
    for name in LINKED:
        if (ROOT / name).exists():
            (cwd / name).symlink_to(ROOT / name)
    beside = cwd / DOCS_REAL_DATA  # where the docs' commands find the logs, beside the "clone"
    beside.parent.mkdir(parents=True)
    beside.symlink_to(real_data)
    return cwd


def environment() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env.update(
        PATH=os.pathsep.join([bin_dir, env.get("PATH", "")]),
        VIRTUAL_ENV=str(Path(sys.executable).parent.parent),
        PYTHONDONTWRITEBYTECODE="1",
        MPLBACKEND="Agg",
    )
    env.pop("PYTHONPATH", None)
    return env


@dataclass
class Outcome:
    ran: list[tuple[Block, float]] = field(default_factory=list)
    skipped: list[Block] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def run_document(parsed: Parsed, cwd: Path) -> Outcome:
    """Every command block in order: skipped ones counted, the others run (all of them, also after
    a failure, so one run names every broken block)."""
    outcome = Outcome()
    env = environment()
    python = PythonSession(cwd, env)
    try:
        for block in parsed.commands:
            if block.skip is not None:
                outcome.skipped.append(block)
                continue
            started = time.monotonic()
            if block.setup is not None:
                ok, out = run_shell(block.setup, f"{block.where} (setup)", cwd, env)
                if not ok:
                    outcome.failures.append(
                        f"{block.where}: the setup above the ```{block.lang} block failed:\n{_tail(out)}"
                    )
                    continue
            if block.kind == "shell":
                ok, out = run_shell(block.code, block.doc, cwd, env, first_line=block.line + 1)
            else:
                ok, out = python.run(block.code, block.doc, block.line)
            outcome.ran.append((block, time.monotonic() - started))
            if not ok:
                outcome.failures.append(
                    f"{block.where}: the ```{block.lang} block fails as written (fix the command or the doc; "
                    f"if it cannot run here, mark it <!-- docs-test: skip: why -->):\n{_tail(out)}"
                )
    finally:
        python.close()
    return outcome


# -- the checker itself, on made-up documents -----------------------------------------------------

SYNTHETIC = """\
# title

```bash
echo ran > ran.txt
```

<!-- docs-test: skip: needs a GPU -->
```bash
exit 3
```

```python
from pathlib import Path
seen = Path("ran.txt").read_text().strip()
```

```python
assert seen == "ran"  # the name from the block above
```

<!-- docs-test: setup:
printf 'hi\\n' > given.txt
-->
```sh
grep -q hi given.txt
```

```text
exit 1   (output, never run)
```
"""


def _run_text(text: str, tmp_path: Path) -> tuple[Parsed, Outcome]:
    parsed = parse(text, "doc.md")
    cwd = tmp_path / "knowlyr"
    cwd.mkdir()
    return parsed, run_document(parsed, cwd)


def test_the_checker_runs_commands_and_skips_marked_ones(tmp_path):
    parsed, outcome = _run_text(SYNTHETIC, tmp_path)
    assert parsed.errors == []
    assert [(b.line, b.kind) for b, _ in outcome.ran] == [(3, "shell"), (12, "python"), (17, "python"), (24, "shell")]
    assert [(b.line, b.skip) for b in outcome.skipped] == [(8, "needs a GPU")]
    assert outcome.failures == []


def test_an_unmarked_failing_block_fails_naming_its_line(tmp_path):
    text = "intro\n\n```bash\necho first\nfalse\necho never\n```\n\n```python\nraise ValueError('broken')\n```\n"
    parsed, outcome = _run_text(text, tmp_path)
    assert parsed.errors == []
    assert len(outcome.failures) == 2
    shell, python = outcome.failures
    assert shell.startswith("doc.md:3: the ```bash block fails as written")
    assert "first" in shell and "never" not in shell and "exit status 1" in shell
    assert python.startswith("doc.md:9:") and "ValueError: broken" in python
    assert 'File "doc.md", line 10' in python  # the document's own line


def test_a_failing_pipe_and_a_failing_setup_fail(tmp_path):
    text = "```bash\nfalse | cat\n```\n\n<!-- docs-test: setup: cp missing.json run.json -->\n```bash\ntrue\n```\n"
    _, outcome = _run_text(text, tmp_path)
    assert [f.split(":", 2)[1] for f in outcome.failures] == ["1", "6"]
    assert "the setup above" in outcome.failures[1]


def test_a_block_that_runs_too_long_is_stopped_with_what_it_started(tmp_path, monkeypatch):
    monkeypatch.setitem(globals(), "BLOCK_SECONDS", 1)
    text = "```bash\nsleep 60 &\necho started\nsleep 60\n```\n\n```python\nimport time\ntime.sleep(60)\n```\n"
    started = time.monotonic()
    _, outcome = _run_text(text, tmp_path)
    assert time.monotonic() - started < 30
    assert len(outcome.failures) == 2
    assert all("still running after 1 s" in f for f in outcome.failures)
    assert "started" in outcome.failures[0]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<!-- docs-test: skip: -->\n```bash\nexit 1\n```\n", "doc.md:2: a skip marker without its reason"),
        ("<!-- docs-test: skip -->\n```bash\nexit 1\n```\n", "doc.md:2: a skip marker without its reason"),
        ("<!-- docs-test: maybe: later -->\n```bash\nexit 1\n```\n", "doc.md:2: unknown docs-test marker 'maybe'"),
        ("```\nknowlyr-core envs\n```\n", "doc.md:1: a fence without a language"),
        ("```console\n$ knowlyr-core envs\n```\n", "doc.md:1: ```console is a session transcript"),
        ("<!-- docs-test: skip: why -->\n\n```bash\nexit 1\n```\n", "doc.md:1: a docs-test marker not directly above"),
        ("<!-- docs-test: skip: why -->\n```text\nout\n```\n", "doc.md:2: a docs-test marker on a ```text block"),
    ],
)
def test_a_marker_without_reason_or_a_fence_without_language_is_an_error(text, error):
    errors = parse(text, "doc.md").errors
    assert any(e.startswith(error) for e in errors), errors


def test_fences_inside_longer_fences_and_lists_are_read_as_written():
    text = "- step:\n\n    ```bash\n    echo in a list\n    ```\n\n````text\n```bash\nnot a block\n```\n````\n"
    parsed = parse(text, "doc.md")
    assert parsed.errors == []
    assert [(b.line, b.lang, b.code) for b in parsed.blocks] == [
        (3, "bash", "echo in a list\n"),
        (7, "text", "```bash\nnot a block\n```\n"),
    ]


# -- the docs ----------------------------------------------------------------------------------------


def _parsed(doc: str) -> Parsed:
    return parse((ROOT / doc).read_text(encoding="utf-8"), doc)


#: the documents with at least one block to run
RUN = [doc for doc in DOCUMENTS if any(b.skip is None for b in _parsed(doc).commands)]


def test_every_block_of_the_docs_is_a_command_or_says_what_it_is():
    errors = [e for doc in DOCUMENTS for e in _parsed(doc).errors]
    assert not errors, "\n".join(errors)


@pytest.mark.integration  # the real CLIs on the published agent logs
@pytest.mark.parametrize("doc", RUN)
def test_the_commands_of_a_document_run_as_written(doc, tmp_path):
    parsed = _parsed(doc)
    runnable = [b for b in parsed.commands if b.skip is None]
    named = DOCS_REAL_DATA.relative_to("..").as_posix()  # as the commands write it, after any ../
    needs_logs = any(named in (b.setup or "") + b.code for b in runnable)
    real = real_data() if needs_logs else Path(os.environ.get(REAL_DATA_ENV_VAR) or tmp_path / "no-real-data")
    outcome = run_document(parsed, workspace(tmp_path, real))
    assert not outcome.failures, "\n\n".join(outcome.failures)
