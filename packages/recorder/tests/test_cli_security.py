"""Issue #11, findings 7 and 11, through the real ``knowlyr-recorder`` command (a subprocess).

Before the fix ``convert --skip-invalid`` with every input bad exited 1 but had already
replaced an existing output with an empty file, and a non-finite number in a framework log
was written out (``-Infinity`` in the file, ``null`` on stdout). Now the output is replaced
only by a run that converted something (none did: exit 2, bad input), and a non-finite number
is one clear error naming its JSON path in the log.
"""

import json
import subprocess
import sys

import pytest

OLD = '{"earlier": "run"}\n'


def recorder(*args):
    done = subprocess.run(
        [sys.executable, "-m", "agentrecorder.cli", *map(str, args)], capture_output=True, text=True, timeout=120
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.mark.parametrize("content", ["", "garbage", '{"unknown": "format"}', "[" * 100_000])
def test_security_convert_skip_invalid_keeps_an_existing_output(tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    output = tmp_path / "trajectories.jsonl"
    output.write_text(OLD)
    done = recorder("convert", bad, "-o", output, "--skip-invalid")
    assert done.returncode == 2
    warning, error = done.stderr.strip().splitlines()
    assert warning.startswith(f"warning: skipped {bad}")
    assert error == f"error: {bad}: no file converted (1 skipped); nothing written, {output} left as it was"
    assert output.read_text() == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "trajectories.jsonl"]  # no temp file left


def test_security_convert_skip_invalid_writes_the_good_files(tmp_path, real):
    bad = tmp_path / "bad.json"
    bad.write_text("garbage")
    output = tmp_path / "trajectories.jsonl"
    output.write_text(OLD)
    done = recorder("convert", bad, real("swe-agent_test-repo-i1.traj"), "-o", output, "--skip-invalid", "-q")
    assert done.returncode == 0, done.stderr
    assert len(output.read_text().splitlines()) == 1 and output.read_text() != OLD


@pytest.mark.parametrize(
    ("where", "field"),
    [("info", "$.info.custom_score"), ("model_stats", "$.info.model_stats.instance_cost")],
)
@pytest.mark.parametrize("to_stdout", [False, True])
def test_security_convert_refuses_non_finite_numbers(tmp_path, real_json, where, field, to_stdout):
    log = real_json("swe-agent_test-repo-i1.traj")
    if where == "info":
        log["info"]["custom_score"] = "@"
    else:
        log["info"]["model_stats"]["instance_cost"] = "@"
    path = tmp_path / "run.traj"
    path.write_text(json.dumps(log).replace('"@"', "-Infinity"))
    output = tmp_path / "out.jsonl"
    output.write_text(OLD)
    done = recorder("convert", path, *([] if to_stdout else ["-o", output]))
    assert done.returncode == 2
    (message,) = done.stderr.strip().splitlines()
    assert message == f"error: {path}: {field}: non-finite number (-Infinity)"
    assert done.stdout == "" and output.read_text() == OLD
