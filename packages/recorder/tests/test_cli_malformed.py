"""Every ``knowlyr-recorder`` command that reads files refuses the malformed corpus the knowlyr way.

The corpus (``knowlyrcore.testing.malformed_corpus``: empty, truncated, binary, UTF-16, Latin-1,
nested 100,000 deep, an overlong line, NaN, wrong types, a bad line 5,000) is built three times:
as trajectory JSONL, as an OpenAI-chat JSONL log and as a one-document ``.json`` log (the last two
go through format auto-detection). The answer (``check_refusal``): exit 2, one ``error:`` line
naming the file, no traceback, nothing on stdout, an existing output file untouched.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentrecorder import convert_record, get_adapter
from agentrecorder.cli import main
from knowlyrcore.testing import MALFORMED_KINDS, check_refusal, malformed_corpus

CHAT_LOG = {
    "task_id": 1,
    "reward": 1.0,
    "messages": [
        {"role": "user", "content": "list the files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": "a.py"},
    ],
}
TRAJECTORY = next(convert_record(get_adapter("openai-chat"), CHAT_LOG)).model_dump(mode="json")
# corpus name -> (good record, a record that parses but breaks the format, file suffix, kinds)
CORPORA = {
    "trajectory": (TRAJECTORY, {"schema_version": "1.0", "steps": [{"tool_call": "ls"}], "outcome": 7}, ".jsonl", None),
    "log-jsonl": (CHAT_LOG, {"task_id": 1, "messages": [{"role": 5, "content": {"x": 1}}]}, ".jsonl", None),
    # a one-document log has no lines to bound or count
    "log-json": (CHAT_LOG, {"messages": "none"}, ".json", set(MALFORMED_KINDS) - {"long_line", "bad_line"}),
}
COMMANDS = {
    "convert": ["convert", "{F}", "-o", "{OUT}"],
    "validate": ["validate", "{F}"],
    "stats": ["stats", "{F}"],
    "show": ["show", "{F}"],
    "view": ["view", "{F}", "-o", "{OUT}"],
    "export atif": ["export", "--to", "atif", "{F}", "-o", "{OUT}"],
    "export adp": ["export", "--to", "adp", "{F}", "-o", "{OUT}"],
}
PRECIOUS = b'{"precious": "an earlier result"}\n'
LINE_LIMIT = 1 << 20  # KNOWLYR_MAX_LINE_BYTES for the table; the overlong line is 2 MiB
BAD_LINE = 5_000  # the table's bad line: any line past the first shows the number is the one read


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, dict[str, Path]]:
    root = tmp_path_factory.mktemp("malformed")
    return {
        name: malformed_corpus(root / name, good, wrong, suffix=suffix, kinds=kinds, long_line_mb=2, bad_line=BAD_LINE)
        for name, (good, wrong, suffix, kinds) in CORPORA.items()
    }


def _cases():
    for name, (*_, kinds) in CORPORA.items():
        for kind in sorted(kinds or MALFORMED_KINDS):
            yield name, kind


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(("name", "kind"), list(_cases()))
def test_every_reading_command_refuses_malformed_input(name, kind, command, corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KNOWLYR_MAX_LINE_BYTES", str(LINE_LIMIT))
    bad = corpus[name][kind]
    out = tmp_path / "existing-output"
    out.write_bytes(PRECIOUS)
    code = main([part.format(F=bad, OUT=out) for part in COMMANDS[command]])
    captured = capsys.readouterr()
    line = check_refusal(code, captured.out, captured.err, bad, outputs={out: PRECIOUS})
    expected = {
        "utf16": "the file is UTF-16 text; convert it to UTF-8",
        "long_line": f"line longer than {LINE_LIMIT} bytes",
        "nan": "non-finite number (NaN)",
        "bad_line": f":{BAD_LINE}: ",
        "empty": "empty file",
        "binary": "binary data",
        "latin1": "not UTF-8 text",
    }.get(kind)
    if command == "convert" and name == "trajectory" and kind == "bad_line":
        expected = ":1: unknown log format"  # convert takes logs: a trajectory line is none of their formats
    assert expected is None or expected in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing-output"]  # no temp file, no page


def test_nan_is_named_by_its_json_path(tmp_path, capsys):
    log = tmp_path / "run.json"
    log.write_text(json.dumps({**CHAT_LOG, "extra": {"scores": [1.0, "@"]}}).replace('"@"', "NaN"))
    assert main(["stats", str(log)]) == 2  # refused although no adapter reads "extra"
    assert capsys.readouterr().err == f"error: {log}: $.extra.scores[1]: non-finite number (NaN)\n"


def test_the_default_line_limit_refuses_a_200mb_line_without_reading_it(tmp_path):
    """Through the console script, with the default limit (16 MiB): peak memory stays far below the line."""
    bad = malformed_corpus(tmp_path, CHAT_LOG, {}, kinds=["long_line"])["long_line"]
    measure = (
        "import re, sys\nfrom agentrecorder.cli import main\ncode = main(sys.argv[1:])\n"
        "print(code, int(re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1)) // 1024)"
    )
    done = subprocess.run(
        [sys.executable, "-c", measure, "validate", str(bad)], capture_output=True, text=True, timeout=300
    )
    code, peak_mb = map(int, done.stdout.split())
    line = check_refusal(code, "", done.stderr, bad)
    assert line == f"error: {bad}:1: line longer than {16 * 1024 * 1024} bytes (KNOWLYR_MAX_LINE_BYTES)"
    assert peak_mb < 150, f"refusing a 200 MB line peaked at {peak_mb} MB"


def test_console_script_utf16(corpus, tmp_path):
    script = Path(sys.executable).parent / "knowlyr-recorder"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "agentrecorder.cli"]
    bad = corpus["log-json"]["utf16"]
    done = subprocess.run([*command, "validate", str(bad)], capture_output=True, text=True, timeout=120)
    line = check_refusal(done.returncode, done.stdout, done.stderr, bad)
    assert line == f"error: {bad}: the file is UTF-16 text; convert it to UTF-8"


def test_validate_checks_every_file_and_names_each_bad_one(corpus, tmp_path, capsys):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(TRAJECTORY) + "\n")
    bad = [corpus["trajectory"]["truncated"], corpus["log-json"]["utf16"]]
    assert main(["validate", str(bad[0]), str(good), str(bad[1])]) == 2
    captured = capsys.readouterr()
    assert captured.out == f"{good}: ok, 1 trajectory, 1 step\n"
    errors = captured.err.splitlines()
    assert [line.split(": ", 2)[1].split(":")[0] for line in errors] == [str(p) for p in bad]
    assert all(line.startswith("error: ") for line in errors)


def test_skip_invalid_converts_what_it_can_and_exits_2_when_nothing_is_left(corpus, tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(CHAT_LOG))
    bad = [corpus["log-json"][kind] for kind in ("utf16", "nan", "empty")]
    out = tmp_path / "out.jsonl"

    assert main(["convert", *map(str, bad), str(good), "-o", str(out), "--skip-invalid", "-q"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line.split(" ", 3)[2].rstrip(":") for line in err[:3]] == [str(p) for p in bad]
    assert all(line.startswith("warning: skipped ") for line in err[:3])
    assert err[3] == f"wrote 1 trajectory from 1 file to {out}; 3 files skipped"
    converted = out.read_bytes()
    assert [json.loads(line)["task"]["id"] for line in converted.splitlines()] == ["1"]

    assert main(["convert", *map(str, bad), "-o", str(out), "--skip-invalid"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 4 and all(line.startswith("warning: skipped ") for line in err[:3])
    assert (
        err[3] == f"error: {', '.join(map(str, bad))}: no file converted (3 skipped); nothing written, "
        f"{out} left as it was"
    )
    assert out.read_bytes() == converted

    assert main(["convert", *map(str, bad), "--skip-invalid"]) == 2  # to stdout: nothing printed there
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.splitlines()[-1].endswith("(3 skipped); nothing written")


def test_show_reads_to_the_end_before_printing(tmp_path, capsys):
    """--index 0 is on line 1, but line 50,000 is broken: nothing is shown."""
    bad = malformed_corpus(tmp_path, TRAJECTORY, {}, kinds=["bad_line"])["bad_line"]
    assert main(["show", str(bad), "--index", "0"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(f"error: {bad}:50000: ")
