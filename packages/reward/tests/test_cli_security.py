"""Issue #11, findings 7 and 11, through the real ``knowlyr-reward`` command (a subprocess).

Before the fix ``score`` wrote non-finite numbers: a NaN step reward from a weights file
holding ``Infinity``, and any ``-Infinity`` / ``NaN`` of its input passed through untouched;
deeply nested JSON gave a ``RecursionError`` traceback; an empty input wrote an empty output
with exit 0. Now every case is one line (``path:line: field: problem``), exit 1, and an
existing output stays as it was.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from knowlyrcore import Observation, Step, TaskInfo, ToolCall, Trajectory
from knowlyrcore.testing import real_data

#: one step of a coding trajectory, as a JSONL line's object
TRAJ = Trajectory(
    id="t1",
    task=TaskInfo(description="read a.py", domain="coding"),
    steps=[
        Step(
            index=0,
            tool_call=ToolCall(name="read_file", parameters={"path": "a.py"}),
            observation=Observation(output="x = 1"),
        )
    ],
).model_dump(mode="json", exclude_none=True)
OLD = '{"untouched": true}\n'


def score(tmp_path, *args):
    output = tmp_path / "scored.jsonl"
    output.write_text(OLD)
    done = subprocess.run(
        [sys.executable, "-m", "agentreward.cli", "score", *map(str, args), "-o", str(output), "-q"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done, output


def refuse(text: str) -> float:
    raise ValueError(f"non-finite number {text} in the output")


def strict_lines(path: Path) -> list:
    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def test_security_score_refuses_an_infinite_weight(tmp_path):
    (tmp_path / "t.jsonl").write_text(json.dumps(TRAJ) + "\n")
    (tmp_path / "w.json").write_text('{"goal_progress": Infinity, "tool_selection": 1}')
    done, output = score(tmp_path, tmp_path / "t.jsonl", "--weights", tmp_path / "w.json")
    assert done.returncode == 2
    expected = f"error: {tmp_path / 'w.json'}: rubric weights must be finite numbers (no NaN/Infinity)"
    assert done.stderr.strip().splitlines() == [expected]
    assert output.read_text() == OLD


def test_security_score_refuses_a_non_finite_calibration(tmp_path):
    (tmp_path / "t.jsonl").write_text(json.dumps(TRAJ) + "\n")
    (tmp_path / "cal.json").write_text('{"weights": {}, "slope": -Infinity, "intercept": 0}')
    done, output = score(tmp_path, tmp_path / "t.jsonl", "--calibration", tmp_path / "cal.json")
    assert done.returncode == 2 and "slope: non-finite number (-Infinity)" in done.stderr
    assert output.read_text() == OLD


@pytest.mark.parametrize(
    ("where", "token", "field"),
    [
        ("outcome", "-Infinity", "outcome.score"),
        ("parameters", "NaN", "steps[0].tool_call.parameters.n"),
        ("reward", "1e999", "reward"),
    ],
)
@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_security_score_refuses_non_finite_input(tmp_path, where, token, field, suffix):
    record = json.loads(json.dumps(TRAJ))
    if where == "outcome":
        record["outcome"] = {"success": True, "score": "@"}
    elif where == "parameters":
        record["steps"][0]["tool_call"]["parameters"]["n"] = "@"
    else:
        record["reward"] = "@"
    path = tmp_path / f"in{suffix}"
    path.write_text(
        json.dumps(TRAJ) + "\n" + json.dumps(record).replace('"@"', token) + "\n"
        if suffix == ".jsonl"
        else "[" + json.dumps(TRAJ) + ",\n" + json.dumps(record).replace('"@"', token) + "]"
    )
    done, output = score(tmp_path, path)
    assert done.returncode == 2
    where = f"{path}:2: {field}" if suffix == ".jsonl" else f"{path}: [1].{field}"  # a JSON array: its index
    assert done.stderr.strip().splitlines() == [f"error: {where}: non-finite number ({token})"]
    assert output.read_text() == OLD


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_security_score_deep_nesting_is_one_line(tmp_path, suffix):
    path = tmp_path / f"deep{suffix}"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    done, output = score(tmp_path, path)
    assert done.returncode == 2
    line = ":1" if suffix == ".jsonl" else ""
    assert done.stderr.strip().splitlines() == [f"error: {path}{line}: nested deeper than 100 levels"]
    assert output.read_text() == OLD


@pytest.mark.parametrize("command", ["score", "pairs"])
def test_security_empty_input_is_an_error(tmp_path, command):
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    output = tmp_path / "out.jsonl"
    output.write_text(OLD)
    done = subprocess.run(
        [sys.executable, "-m", "agentreward.cli", command, str(path), "-o", str(output)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [f"error: {path}: no trajectories (empty file)"]
    assert output.read_text() == OLD


def test_security_scores_of_a_real_log_are_finite(tmp_path):
    """A real SWE-agent run, converted by knowlyr-recorder, scores to finite numbers only."""
    log = real_data("swe-agent_test-repo-i1.traj")
    pytest.importorskip("agentrecorder", reason="converting the log needs knowlyr-recorder, a sibling")
    from agentrecorder.convert import convert_file

    (tmp_path / "t.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in convert_file(log)))
    done, output = score(tmp_path, tmp_path / "t.jsonl")
    assert done.returncode == 0, done.stderr
    (record,) = strict_lines(output)
    numbers = [record["reward"]] + [s["reward"] for s in record["steps"]]
    numbers += [v for s in record["steps"] for v in s["rubric_scores"].values()]
    assert len(numbers) == 1 + 6 * len(record["steps"]) and all(math.isfinite(n) and 0 <= n <= 1 for n in numbers)


def test_security_calibration_save_refuses_non_finite_and_keeps_the_old_file(tmp_path):
    from agentreward.calibration import Calibrator
    from agentreward.errors import CalibrationError

    path = tmp_path / "cal.json"
    Calibrator(weights={}, slope=1.0, intercept=0.0).save(path)
    before = path.read_text()
    with pytest.raises(CalibrationError, match="non-finite"):
        Calibrator(weights={}, slope=float("nan"), intercept=0.0).save(path)
    assert path.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["cal.json"]


def test_security_rubric_weights_must_be_finite():
    from agentreward.errors import RewardError
    from agentreward.rubrics import normalise

    for bad in (float("inf"), float("nan")):
        with pytest.raises(RewardError, match="finite"):
            normalise({"goal_progress": bad})


def test_security_weights_errors_never_echo_the_file(tmp_path):
    from agentreward.errors import RewardError
    from agentreward.rubrics import load_weights

    broken = tmp_path / "w.yaml"
    broken.write_text("root:x:0:0:secret-line\nfoo: [bar\n")
    keys = tmp_path / "k.yaml"
    keys.write_text("root:secret-key: 1\ngoal_progress: 1\n")
    for path in (broken, keys):
        with pytest.raises(RewardError) as info:
            load_weights(path)
        assert str(path) in str(info.value) and "secret" not in str(info.value)
