"""The coding tools (read_file, write_file, edit_file, bash, grep, list_files, git, run_tests)
implemented on a ``Sandbox``.

No parameter ever reaches a shell parser: files are read and written through the host-side
workspace API, searches and git run as argument vectors (with ``--`` before paths and ``-e``
before patterns), and ``run_tests`` hands an optional path to the task's test command through
an environment variable. Only ``bash`` runs shell code, because running shell code is what it
is for. Every tool returns a ``ToolResult``; failures are error results, never exceptions, so
an agent's bad call becomes an observation it can learn from.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from agentsandbox.backends.base import SNAPSHOT_MOUNT, Sandbox
from agentsandbox.config import check_timeout
from agentsandbox.workspace import WorkspacePathError
from knowlyrcore.models import ToolResult
from knowlyrcore.numbers import checked_number

#: Largest file ``read_file`` returns in full.
MAX_READ_BYTES = 512 * 1024
#: Lines ``list_files`` returns at most.
MAX_LIST_ENTRIES = 2000
#: A line number ``read_file`` takes: no file it returns has more lines than bytes.
_LINE_RANGE = {"minimum": 1, "maximum": MAX_READ_BYTES + 1, "integer": True}


def _resolve(sandbox: Sandbox, path: str | None) -> tuple[str, ToolResult | None]:
    """The absolute in-sandbox path of a workspace path, or an error result."""
    try:
        parts = sandbox.workspace.parts(path or ".")
    except WorkspacePathError as exc:
        return "", ToolResult(error=str(exc))
    return "/".join([sandbox.config.workdir.rstrip("/"), *parts]), None


def _file_error(path: str, exc: Exception) -> ToolResult:
    if isinstance(exc, WorkspacePathError):
        return ToolResult(error=str(exc))
    if isinstance(exc, FileNotFoundError):
        return ToolResult(error=f"file not found: {path}")
    if isinstance(exc, IsADirectoryError):
        return ToolResult(error=f"{path} is a directory")
    if isinstance(exc, NotADirectoryError):
        return ToolResult(error=f"a parent of {path} is not a directory")
    if isinstance(exc, PermissionError):
        return ToolResult(error=f"permission denied: {path}")
    return ToolResult(error=f"cannot access {path}: {exc}")


def read_file(sandbox: Sandbox, path: str, start_line: int | None = None, end_line: int | None = None) -> ToolResult:
    try:
        data = sandbox.read_file(path, MAX_READ_BYTES + 1)
    except (OSError, WorkspacePathError) as exc:
        return _file_error(path, exc)
    truncated = len(data) > MAX_READ_BYTES
    text = data[:MAX_READ_BYTES].decode("utf-8", errors="replace")
    if start_line is None and end_line is None:
        return ToolResult(output=text, truncated=truncated)
    lines = text.splitlines(keepends=True)
    try:  # JSON Schema's "integer" admits 2.0, which no slice takes
        start = 1 if start_line is None else checked_number(start_line, "start_line", **_LINE_RANGE)
        # past the end reads to the end, however far past
        end = len(lines) if end_line is None else checked_number(end_line, "end_line", clamp=True, **_LINE_RANGE)
    except ValueError as exc:
        return ToolResult(error=str(exc))
    end = min(end, len(lines))
    if start > len(lines) and lines:
        return ToolResult(error=f"{path} has {len(lines)} lines; start_line {start} is past the end")
    if end < start:
        return ToolResult(error=f"end_line {end} is before start_line {start}")
    return ToolResult(
        output="".join(lines[start - 1 : end]), metadata={"lines": [start, end], "total_lines": len(lines)}
    )


def write_file(sandbox: Sandbox, path: str, content: str) -> ToolResult:
    try:
        sandbox.write_file(path, content)
    except (OSError, WorkspacePathError) as exc:
        return _file_error(path, exc)
    return ToolResult(output=f"wrote {len(content.encode())} bytes to {path}")


def edit_file(sandbox: Sandbox, path: str, old_str: str, new_str: str) -> ToolResult:
    if old_str == "":
        return ToolResult(error="old_str is empty; give the exact text to replace")
    try:
        text = sandbox.read_file(path).decode("utf-8")
    except UnicodeDecodeError:
        return ToolResult(error=f"{path} is not UTF-8 text")
    except (OSError, WorkspacePathError) as exc:
        return _file_error(path, exc)
    count = text.count(old_str)
    if count == 0:
        return ToolResult(error=f"old_str not found in {path}; it must match the file exactly, whitespace included")
    if count > 1:
        return ToolResult(error=f"old_str occurs {count} times in {path}; add surrounding lines to make it unique")
    try:
        sandbox.write_file(path, text.replace(old_str, new_str, 1))
    except (OSError, WorkspacePathError) as exc:
        return _file_error(path, exc)
    line = text[: text.index(old_str)].count("\n") + 1
    return ToolResult(output=f"edited {path} at line {line}")


def bash(sandbox: Sandbox, command: str, timeout: float | None = None) -> ToolResult:
    """Run ``command``; the agent may shorten the timeout, never extend it past ``config.timeout``."""
    if timeout is not None:
        try:
            timeout = check_timeout(timeout, clamp_to=sandbox.config.timeout)
        except ValueError as exc:
            return ToolResult(error=str(exc))
    return sandbox.run(command, timeout=timeout)


def grep(sandbox: Sandbox, pattern: str, path: str | None = None, include: str | None = None) -> ToolResult:
    target, error = _resolve(sandbox, path)
    if error:
        return error
    argv = ["grep", "-rnIE", "--exclude-dir=.git"]
    if include:
        argv.append(f"--include={include}")
    result = sandbox.run_argv([*argv, "-e", pattern, "--", target])
    if result.exit_code == 1 and not result.output:
        return ToolResult(output="no matches", exit_code=0)
    if result.exit_code == 2:
        return ToolResult(output=result.output, exit_code=2, error="grep failed (bad pattern or path)")
    return result


def list_files(sandbox: Sandbox, path: str | None = None, pattern: str | None = None) -> ToolResult:
    target, error = _resolve(sandbox, path)
    if error:
        return error
    argv = ["find", target, "-path", "*/.git", "-prune", "-o", "-type", "f"]
    if pattern:
        argv += ["-path" if "/" in pattern else "-name", pattern]
    result = sandbox.run_argv([*argv, "-print"])
    if result.exit_code != 0:
        return result.model_copy(update={"error": result.error or "cannot list files"})
    prefix = target.rstrip("/") + "/"
    names = sorted(line[len(prefix) :] if line.startswith(prefix) else line for line in result.output.splitlines())
    more = len(names) - MAX_LIST_ENTRIES
    output = "\n".join(names[:MAX_LIST_ENTRIES]) + (f"\n... {more} more" if more > 0 else "")
    return ToolResult(output=output, exit_code=0, truncated=more > 0, metadata={"count": len(names)})


def git(sandbox: Sandbox, subcommand: str, path: str | None = None) -> ToolResult:
    extra = {"status": ["--short", "--branch"], "diff": [], "log": ["-n", "20", "--oneline"]}
    if subcommand not in extra:
        return ToolResult(error=f"git subcommand must be status, diff or log, not {subcommand!r}")
    argv = ["git", "--no-pager", subcommand, *extra[subcommand]]
    if path:
        target, error = _resolve(sandbox, path)
        if error:
            return error
        argv += ["--", target]
    return sandbox.run_argv(argv)


_COUNT = {key: re.compile(rf"(\d+) {key}") for key in ("passed", "failed", "error")}
#: unittest's summary: "Ran N tests in 0.01s", a blank line, then "OK" or "FAILED", with an optional
#: "(failures=1, errors=2, skipped=1, expected failures=1, unexpected successes=1)".
_UNITTEST = re.compile(r"^Ran (\d+) tests? in [\d.]+s\s*\n\s*\n(?:OK|FAILED)(?: \(([^)\n]*)\))?", re.MULTILINE)


def run_tests(
    sandbox: Sandbox,
    test_command: str | None,
    path: str | None = None,
    *,
    grade: bool = False,
    protected: list[str] = (),
) -> ToolResult:
    """Run the task's test command (trusted: it comes from the task, not the agent).

    ``grade=True`` is the run a reward rests on: ``Sandbox.run_clean`` kills everything the
    episode left running, puts the ``protected`` paths (the task's tests) back, and runs the
    command in a clean environment. Otherwise it runs in the agent's shell, as the
    ``run_tests`` tool the agent calls mid-episode.
    """
    if not test_command:
        return ToolResult(error="this task defines no test command")
    if grade:
        result = sandbox.run_clean(f"cd {sandbox.config.workdir} && {test_command}", restore=list(protected))
        return _with_counts(result)
    argv = ["env"]
    script = test_command
    if path:
        _, error = _resolve(sandbox, path)
        if error:
            return error
        # The path is data in the environment, quoted by the shell itself: never parsed as code.
        argv.append(f"KNOWLYR_TEST_PATH={path}")
        script = f'{test_command} "$KNOWLYR_TEST_PATH"'
    return _with_counts(sandbox.run_argv([*argv, "bash", "-c", f"cd {sandbox.config.workdir} && {script}"]))


def parse_test_counts(output: str) -> dict[str, int]:
    """``{passed, failed, error}`` of a test run's output: unittest's summaries (every ``Ran N
    tests`` of the output, summed), else pytest's ``3 passed, 1 failed, 2 errors`` line.

    unittest counts a failure, an error, a skip and an expected failure once each among the N
    it ran; an unexpected success fails the run, so it counts as failed.
    """
    runs = _UNITTEST.findall(output)
    if not runs:
        return {key: int(m.group(1)) if (m := rx.search(output)) else 0 for key, rx in _COUNT.items()}
    counts = {"passed": 0, "failed": 0, "error": 0}
    for ran, details in runs:
        found = {name.strip(): int(n) for name, n in re.findall(r"([a-z ]+)=(\d+)", details)}
        failed = found.get("failures", 0) + found.get("unexpected successes", 0)
        errors = found.get("errors", 0)
        not_run = found.get("skipped", 0) + found.get("expected failures", 0)
        counts["passed"] += int(ran) - failed - errors - not_run
        counts["failed"] += failed
        counts["error"] += errors
    return counts


def _with_counts(result: ToolResult) -> ToolResult:
    return result.model_copy(update={"metadata": {**result.metadata, "tests": parse_test_counts(result.output)}})


#: The patch is computed in a clean environment: nothing the agent exported (``GIT_DIR``, ...),
#: no user or system git config.
_CLEAN_GIT_ENV = [
    "env",
    "-i",
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME=/",
    "GIT_CONFIG_GLOBAL=/dev/null",
    "GIT_CONFIG_NOSYSTEM=1",
]
#: A workspace that is not a git repository is diffed against the snapshot the episode started
#: from ($1, mounted read-only) in a throwaway repository in the sandbox's scratch space: the
#: snapshot's tree is written, then the workspace ($2) staged over it. Python and pytest caches
#: are left out, as a repository's .gitignore would.
_SNAPSHOT_DIFF = r"""set -e
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
git init -q --bare "$d"
mkdir -p "$d/info" && printf '%s\n' __pycache__/ '*.pyc' .pytest_cache/ >"$d/info/exclude"
git --git-dir="$d" --work-tree="$1" add -A
base=$(git --git-dir="$d" write-tree)
git --git-dir="$d" --work-tree="$2" add -A
git --git-dir="$d" --no-pager diff --cached --no-ext-diff --no-textconv "$base"
"""


def diff(sandbox: Sandbox) -> str | None:
    """The workspace's changes as a git patch (new files included): against ``HEAD`` in a git
    repository, else against the snapshot the workspace was reset to. None if git fails."""
    workdir = sandbox.config.workdir
    # The repository's own config is the agent's to write: keep its fsmonitor, external diff and
    # textconv programs from running (they would only fake the patch, but nothing should run).
    git = [*_CLEAN_GIT_ENV, "git", "-C", workdir, "-c", "core.fsmonitor=false"]
    check = sandbox.run_argv([*git, "rev-parse", "--is-inside-work-tree"])
    if check.exit_code != 0:
        result = sandbox.run_argv([*_CLEAN_GIT_ENV, "bash", "-c", _SNAPSHOT_DIFF, "diff", SNAPSHOT_MOUNT, workdir])
        return result.output if result.exit_code == 0 else None
    sandbox.run_argv([*git, "add", "-A", "--intent-to-add"])
    result = sandbox.run_argv([*git, "--no-pager", "diff", "--no-ext-diff", "--no-textconv"])
    return result.output if result.exit_code == 0 else None


#: Tool name -> implementation taking (sandbox, **params). ``run_tests`` needs the task too.
SANDBOX_TOOLS: dict[str, Callable[..., ToolResult]] = {
    "read_file": read_file,
    "write_file": write_file,
    "edit_file": edit_file,
    "bash": bash,
    "grep": grep,
    "list_files": list_files,
    "git": git,
}


def call_tool(sandbox: Sandbox, name: str, params: dict[str, Any], *, test_command: str | None = None) -> ToolResult:
    """Run sandbox tool ``name`` with already-validated ``params``."""
    if name == "run_tests":
        return run_tests(sandbox, test_command, **params)
    return SANDBOX_TOOLS[name](sandbox, **params)
