"""knowlyr-reward's reader and CLI on bad input: one line, exit 2, the same words as knowlyr-core.

The reader keeps records as dicts (every field passed through) with core's rules for encodings,
line length and ``schema_version``; the CLI runs on ``knowlyrcore.clikit`` like the other five.
"""

import json
import os
import subprocess
import sys

import pytest

from agentreward.cli import main
from agentreward.errors import TrajectoryFormatError
from agentreward.trajectories import read_trajectory_dicts
from knowlyrcore.errors import no_such_file
from knowlyrcore.origin import install_command

GOOD = {"id": "t", "task": {"id": "a", "description": "d"}, "steps": [{"tool_call": {"name": "bash"}}]}


def _score(capsys, path, tmp_path):
    out = tmp_path / "scored.jsonl"
    out.write_text("earlier\n")
    code = main(["score", str(path), "-o", str(out)])
    err = capsys.readouterr().err
    assert out.read_text() == "earlier\n"
    assert err.count("\n") == 1 and err.startswith("error: ")
    return code, err.strip()


@pytest.mark.parametrize(
    ("version", "problem"),
    [
        ("2.0", "schema_version: unsupported version '2.0' (this reader accepts 1.x)"),
        (1.0, "schema_version: must be a string like '1.0', got float"),
    ],
)
def test_schema_version_is_checked_like_core(tmp_path, capsys, version, problem):
    path = tmp_path / "t.jsonl"
    path.write_text(
        json.dumps({**GOOD, "schema_version": "1.4"}) + "\n" + json.dumps({**GOOD, "schema_version": version}) + "\n"
    )
    assert _score(capsys, path, tmp_path) == (2, f"error: {path}:2: {problem}")


def test_utf16_long_line_and_huge_integer(tmp_path, capsys, monkeypatch):
    utf16 = tmp_path / "u.jsonl"
    utf16.write_bytes((json.dumps(GOOD) + "\n").encode("utf-16"))
    assert _score(capsys, utf16, tmp_path) == (2, f"error: {utf16}:1: the file is UTF-16 text; convert it to UTF-8")

    monkeypatch.setenv("KNOWLYR_MAX_LINE_BYTES", "200")
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "metadata": {"x": "y" * 500}}) + "\n")
    assert _score(capsys, long, tmp_path) == (
        2,
        f"error: {long}:2: line longer than 200 bytes (limit: KNOWLYR_MAX_LINE_BYTES)",
    )
    document = tmp_path / "big.json"
    document.write_text(json.dumps([GOOD] * 10))
    assert _score(capsys, document, tmp_path) == (
        2,
        f"error: {document}: larger than 200 bytes (limit: KNOWLYR_MAX_LINE_BYTES)",
    )
    monkeypatch.delenv("KNOWLYR_MAX_LINE_BYTES")

    huge = tmp_path / "int.jsonl"
    huge.write_text('{"steps": [], "reward": ' + "9" * 5000 + "}\n")
    code, line = _score(capsys, huge, tmp_path)
    assert code == 2 and line.startswith(f"error: {huge}:1: invalid JSON: ")


def test_utf8_bom_is_ignored(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD).encode() + b"\n")
    assert [t["id"] for t in read_trajectory_dicts(path)] == ["t"]


def test_bad_options_are_usage_errors(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(GOOD) + "\n")
    assert main(["score", str(path), "-o", str(tmp_path / "o"), "--outcome-weight", "2"]) == 2
    assert "--outcome-weight" in capsys.readouterr().err
    assert main(["pairs", str(path), "-o", str(tmp_path / "o"), "--min-margin", "-1"]) == 2
    assert main(["pairs", str(path), "-o", str(tmp_path / "o")]) == 2  # unscored: run score first
    assert "has no reward: score it first" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "code", "line"),
    [
        (["score", "{bad}", "-o", "{out}"], 2, "error: {bad}:1: steps: must be a list of steps"),
        (["score", "{bad}"], 2, "error: {bad}:1: steps: must be a list of steps"),
        (["eval", "{bad}"], 2, "error: {bad}:1: steps: must be a list of steps"),
        (["eval"], 2, "error: Missing argument 'LABELLED...'. (see 'knowlyr-reward eval --help')"),
        (["nope"], 2, "error: No such command 'nope'. (see 'knowlyr-reward --help')"),
        (["rubrics"], 0, None),
    ],
)
def test_errors_are_one_line_through_cores_runner(tmp_path, capsys, argv, code, line):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"steps": "nope"}\n')
    values = {"bad": bad, "out": tmp_path / "o.jsonl"}
    assert main([a.format(**values) for a in argv]) == code
    err = capsys.readouterr().err
    if line is not None:
        assert err == line.format(**values) + "\n"
    assert not values["out"].exists()


def test_reader_errors_are_trajectory_format_errors(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"steps": [], "x": "caf\xe9"}\n')
    with pytest.raises(TrajectoryFormatError, match=r"t.jsonl:1: not UTF-8 text \(byte 23\)"):
        list(read_trajectory_dicts(path))


@pytest.mark.parametrize(
    "argv",
    [
        ["score", "{missing}"],
        ["score", "{good}", "--weights", "{missing}"],
        ["score", "{good}", "--calibration", "{missing}"],
        ["eval", "{good}", "{missing}"],
        ["pairs", "{missing}", "-o", "{out}"],
        ["calibrate", "{good}", "--labels", "{missing}", "-o", "{out}"],
    ],
)
def test_a_missing_file_is_worded_as_in_every_knowlyr_command(tmp_path, capsys, argv):
    """The line is knowlyrcore.errors.no_such_file's, as in every knowlyr command."""
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(GOOD) + "\n")
    values = {"good": good, "missing": tmp_path / "missing.jsonl", "out": tmp_path / "o.jsonl"}
    assert main([a.format(**values) for a in argv]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"error: {no_such_file(values['missing'])}\n")
    assert not values["out"].exists()


def test_mcp_without_the_sdk_is_cores_one_line(tmp_path):
    """`knowlyr-reward mcp` without the mcp SDK (hidden by a package that fails to import, as when
    it is not installed): core's missing-extra line, exit 2, no traceback."""
    (tmp_path / "mcp").mkdir()
    (tmp_path / "mcp" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'mcp'\", name='mcp')\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    hidden = subprocess.run(
        [sys.executable, "-m", "agentreward.cli", "mcp"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert hidden.returncode == 2, hidden.stderr
    assert (
        hidden.stderr
        == f"error: knowlyr-reward mcp needs the 'mcp' extra: {install_command('knowlyr-reward', 'mcp')}\n"
    )
