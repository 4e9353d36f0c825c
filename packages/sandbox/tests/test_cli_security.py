"""Issue #11, finding 11, through the real ``knowlyr-sandbox`` command (a subprocess).

Before the fix ``run`` gave tracebacks for an empty task file (``IndexError``), an empty JSON
array and deeply nested JSON (``RecursionError``), took the first of several tasks silently,
and ``replay`` gave a ``RecursionError`` traceback on deep nesting and exit 0 on an empty
file. Now each is one line ``error: FILE[:LINE]: problem``, exit 2 (bad input, as the command
documents); a JSONL line or a one-line JSON file is named with its line.
None of these cases reaches a sandbox, so no backend is needed.
"""

import json
import subprocess
import sys

import pytest

DEEP = "[" * 100_000 + "]" * 100_000


def sandbox(*args):
    done = subprocess.run(
        [sys.executable, "-m", "agentsandbox.cli", *map(str, args)], capture_output=True, text=True, timeout=120
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.mark.parametrize(
    ("content", "where", "problem"),
    [
        ("", "", "empty file, no task"),
        ("\n  \n", "", "empty file, no task"),
        ("[]", "", "empty JSON array, no task"),
        ('[{"description": "a"}, {"description": "b"}]', "", "holds 2 tasks; run takes a file with one task object"),
        ('{"description": "a"}\n{"description": "b"}\n', "", "holds 2 tasks; run takes a file with one task object"),
        ("[1]", "", "expected a task object, got int"),
        (DEEP, ":1", "nested deeper than 100 levels"),
        ('{"description": "x",\n "metadata": {"budget": NaN}}', "", "metadata.budget: non-finite number (NaN)"),
        ('{"description": "x", "max_steps": 0}', ":1", "max_steps: Input should be greater than or equal to 1"),
    ],
)
def test_security_run_refuses_bad_task_files(tmp_path, content, where, problem):
    task = tmp_path / "task.json"
    task.write_text(content)
    actions = tmp_path / "actions.jsonl"
    actions.write_text(json.dumps({"tool": "submit", "params": {}}) + "\n")
    done = sandbox("run", task, "--backend", "local", "--actions", actions)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: {task}{where}: {problem}"]


@pytest.mark.parametrize(
    ("content", "where", "problem"),
    [
        ("", "", "empty file, no actions"),
        ("[]", "", "empty JSON array, no actions"),
        (DEEP, ":1", "nested deeper than 100 levels"),
    ],
)
def test_security_run_refuses_bad_action_files(tmp_path, content, where, problem):
    task = tmp_path / "task.json"
    task.write_text(json.dumps({"description": "x", "domain": "coding"}))
    actions = tmp_path / "actions.json"
    actions.write_text(content)
    done = sandbox("run", task, "--backend", "local", "--actions", actions)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: {actions}{where}: {problem}"]


@pytest.mark.parametrize(
    ("content", "where", "problem"),
    [("", "", "no trajectories (empty file)"), (DEEP, ":1", "nested deeper than 100 levels")],
)
def test_security_replay_refuses_empty_and_deep_files(tmp_path, content, where, problem):
    path = tmp_path / "traj.jsonl"
    path.write_text(content + "\n")
    done = sandbox("replay", path, "--backend", "local")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: {path}{where}: {problem}"]
