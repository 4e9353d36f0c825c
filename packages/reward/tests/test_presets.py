"""Seed 003's reward preset, and `score` as seed 001 writes it."""

import json

import pytest

from agentreward import RewardEngine
from agentreward.cli import main
from agentreward.errors import RewardError
from agentreward.presets import seed003_dimensions, target_tools, tool_f1
from agentreward.rules import analyse, rule_scores


def test_tool_f1_by_hand():
    assert tool_f1(["search", "book", "book"], ["search", "book"]) == {
        "precision": pytest.approx(2 / 3, abs=1e-6),
        "recall": 1.0,
        "f1": 0.8,
    }
    assert tool_f1([], []) == {"precision": 1.0, "recall": 1.0, "f1": 1.0}
    assert tool_f1(["x"], ["y"])["f1"] == 0.0


def test_target_tools_from_each_source():
    assert target_tools({"target_tools": ["a"]}) == ["a"]
    assert target_tools({"metadata": {"solution": [{"tool": "get"}, {"tool": "respond"}]}}) == ["get", "respond"]
    assert target_tools({"metadata": {"expected_actions": [{"name": "book", "kwargs": {}}]}}) == ["book"]
    assert target_tools({"description": "x"}) is None


def task_with_solution(make_step, **outcome):
    steps = [
        make_step("get_order", {"order_id": "#W1"}, "{}"),
        make_step("get_order", {"order_id": "#W1"}, "{}"),
        make_step("cancel_order", {"order_id": "#W1"}, "ok"),
        make_step("respond", {"message": "done"}, ""),
    ]
    task = {
        "description": "Please cancel #W1",
        "metadata": {"solution": [{"tool": "get_order"}, {"tool": "cancel_order"}, {"tool": "respond"}]},
    }
    return {"task": task, "steps": steps, **({"outcome": outcome} if outcome else {})}


def test_seed003_dimensions_and_total_by_hand(make_step):
    trajectory = task_with_solution(make_step, success=True)
    signals = analyse(trajectory)
    dims = seed003_dimensions(trajectory, rule_scores(trajectory, signals), signals)
    # used get, get, cancel, respond vs target get, cancel, respond: precision 3/4, recall 1, F1 6/7
    assert dims["tool_f1"] == round(6 / 7, 6) and dims["tool_accuracy"] == dims["tool_f1"]
    assert dims["task_completion"] == 1.0
    assert dims["efficiency"] == 0.75  # the expert needs 3 steps, the agent took 4
    assert dims["timing"] == 1.0 and dims["format"] == 1.0
    scored = RewardEngine(preset="seed-003").score_record(trajectory)
    base = 0.4 * 1 + 0.25 * (6 / 7) + 0.15 * 0.75 + 0.10 + 0.10
    # one exact repeat (the second get_order): redundant_call -0.2 over 4 steps
    assert scored["reward"] == round(base - 0.2 / 4, 6)
    assert scored["metadata"]["reward_dimensions"]["efficiency"] == 0.75


def test_seed003_timing_uses_durations_against_the_budget(make_step):
    trajectory = task_with_solution(make_step)
    trajectory["task"]["metadata"]["time_budget_s"] = 10
    for step in trajectory["steps"]:
        step["duration_s"] = 5.0
    signals = analyse(trajectory)
    assert seed003_dimensions(trajectory, rule_scores(trajectory, signals), signals)["timing"] == 0.5


def test_unknown_preset_is_refused():
    with pytest.raises(RewardError, match="unknown reward preset"):
        RewardEngine(preset="seed-004")


def test_score_a_json_file_to_stdout(tmp_path, make_step, capsys):
    one = task_with_solution(make_step)
    (tmp_path / "one.json").write_text(json.dumps(one))
    (tmp_path / "many.json").write_text(json.dumps([one, one]))
    assert main(["score", str(tmp_path / "one.json"), "--domain", "coding", "-q"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["reward"] > 0
    assert main(["score", str(tmp_path / "many.json"), "--preset", "seed-003", "-q"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(records) == 2 and "reward_dimensions" in records[0]["metadata"]
    assert main(["score", str(tmp_path / "many.json"), "-o", str(tmp_path / "out.jsonl"), "-q"]) == 0
    assert capsys.readouterr().out == "" and len((tmp_path / "out.jsonl").read_text().splitlines()) == 2


def test_eval_prints_one_json_line(tmp_path, make_step, capsys):
    ok = {
        "task": {"description": "run"},
        "outcome": {"success": True},
        "steps": [make_step("bash", {"command": "make"}, "ok", exit_code=0)],
    }
    bad = {
        "task": {"description": "run"},
        "outcome": {"success": False},
        "steps": [make_step("bash", {"command": "make"}, "boom", exit_code=2)],
    }
    path = tmp_path / "labelled.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [ok, bad]) + "\n")
    assert main(["eval", str(path), "-o", str(tmp_path / "report.json")]) == 0
    line = capsys.readouterr().out.strip()
    report = json.loads(line)
    assert report["auc"] == 1.0 and report["trajectories"] == 2 and report["preset"] == "default"
    assert json.loads((tmp_path / "report.json").read_text()) == report
