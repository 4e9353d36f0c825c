"""Issue #11, findings 7 and 11, through the real ``knowlyr-core`` command (a subprocess).

Before the fix ``validate`` accepted ``-Infinity`` / ``NaN`` / ``1e400`` (a scored file written
by ``knowlyr-reward score``), raised a ``RecursionError`` traceback on deeply nested JSON and
said "0 valid trajectories" with exit 0 for an empty file. Now each is one line naming the
file, the line and the field, exit 1.
"""

import json
import subprocess
import sys

import pytest

from knowlyrcore import DataFormatError, Trajectory, read_jsonl, write_jsonl, write_trajectories

GOOD = {
    "schema_version": "1.0",
    "id": "t1",
    "task": {"description": "read a.py", "domain": "coding"},
    "steps": [
        {
            "index": 0,
            "tool_call": {"name": "read_file", "parameters": {"path": "a.py"}},
            "observation": {"output": "x = 1"},
            "reward": 0.5,
        }
    ],
    "reward": 0.5,
}


def validate(*paths):
    done = subprocess.run(
        [sys.executable, "-m", "knowlyrcore.cli", "validate", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


@pytest.mark.parametrize(
    ("edit", "field", "token"),
    [
        (lambda r: r.update(reward="@-Infinity@"), "reward", "-Infinity"),
        (lambda r: r["steps"][0].update(reward="@NaN@"), "steps[0].reward", "NaN"),
        (
            lambda r: r["steps"][0].update(rubric_scores={"goal_progress": "@-Infinity@"}),
            "steps[0].rubric_scores.goal_progress",
            "-Infinity",
        ),
        (lambda r: r.update(outcome={"score": "@Infinity@"}), "outcome.score", "Infinity"),
        (
            lambda r: r["steps"][0]["tool_call"]["parameters"].update(n="@1e400@"),
            "steps[0].tool_call.parameters.n",
            "1e400",
        ),
        (lambda r: r.update(metadata={"loss": "@NaN@"}), "metadata.loss", "NaN"),
    ],
)
def test_security_validate_refuses_non_finite_numbers(tmp_path, edit, field, token):
    record = json.loads(json.dumps(GOOD))
    edit(record)
    path = tmp_path / "scored.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(record).replace(f'"@{token}@"', token) + "\n")
    done = validate(path)
    assert done.returncode == 2
    assert one_line(done.stderr) == f"error: {path}:2: {field}: non-finite number ({token})"


@pytest.mark.parametrize("depth", [150, 100_000])
def test_security_validate_deep_nesting_is_one_line(tmp_path, depth):
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + '{"metadata": ' + "[" * depth + "]" * depth + "}\n")
    done = validate(path)
    assert done.returncode == 2
    assert one_line(done.stderr) == f"error: {path}:2: nested deeper than 100 levels"


def test_security_validate_empty_file_is_an_error(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    done = validate(path)
    assert done.returncode == 2
    assert one_line(done.stderr) == f"error: {path}: no trajectories (empty file)"


def test_security_nesting_at_the_limit_still_reads(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text('{"metadata": ' + "[" * 99 + "]" * 99 + "}\n")  # the object and 99 arrays: 100 levels
    assert len(list(read_jsonl(path))) == 1
    path.write_text('{"metadata": ' + "[" * 100 + "]" * 100 + "}\n")
    with pytest.raises(DataFormatError, match="nested deeper than 100 levels"):
        list(read_jsonl(path))


def test_security_writers_refuse_non_finite_numbers_and_keep_the_old_file(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text('{"old": 1}\n')
    with pytest.raises(DataFormatError) as err:
        write_jsonl(path, [{"a": 1.0}, {"b": {"c": [0.0, float("nan")]}}])
    assert str(err.value) == f"{path}:2: b.c[1]: non-finite number (NaN/Infinity), refusing to write it"
    assert path.read_text() == '{"old": 1}\n' and list(tmp_path.iterdir()) == [path]
    with pytest.raises(DataFormatError, match=r"metadata: .*non-finite number .* at x"):
        write_trajectories(path, [{**GOOD, "metadata": {"x": float("-inf")}}])
    with pytest.raises(ValueError, match="finite number"):
        Trajectory.model_validate({**GOOD, "reward": float("-inf")})


def test_security_reader_reports_bad_lines_and_goes_on(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        json.dumps(GOOD)
        + '\n{"broken\n'
        + json.dumps({**GOOD, "reward": 2}).replace("2}", "NaN}")
        + "\n"
        + json.dumps(GOOD)
        + "\n"
    )
    errors = []
    kept = list(read_jsonl(path, Trajectory, on_error=lambda exc: errors.append(str(exc))))
    assert len(kept) == 2
    assert [e.split(": ", 1)[0] for e in errors] == [f"{path}:2", f"{path}:3"]


def test_security_an_integer_past_the_digit_limit_is_one_line(tmp_path):
    from knowlyrcore.errors import DataFormatError
    from knowlyrcore.jsonl import loads_record

    with pytest.raises(DataFormatError, match=r"f.jsonl:3: invalid JSON: .*digits"):
        loads_record('{"reward": ' + "9" * 5000 + "}", "f.jsonl", 3)


def test_security_domain_profile_errors_never_echo_the_file(tmp_path):
    from knowlyrcore.domain import load_domain_profile
    from knowlyrcore.errors import DomainError

    for name, text in (("d.yaml", "name: x\n  bad: [secret-line\n"), ("d.json", '{"name": "secret-line"')):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(DomainError) as info:
            load_domain_profile(path)
        assert f"{path}:" in str(info.value) and "secret" not in str(info.value), str(info.value)
