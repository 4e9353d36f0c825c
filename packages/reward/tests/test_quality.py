import json

import pytest

from agentreward import RewardEngine
from agentreward.errors import RewardError
from agentreward.quality import evaluate, hide_labels, lowest_step, roc_auc, spearman
from agentreward.rules import analyse


def test_roc_auc_against_hand_counted_pairs():
    # positives 0.9, 0.3; negatives 0.8, 0.1: pairs won 0.9>0.8, 0.9>0.1, 0.3>0.1 -> 3 of 4
    assert roc_auc([0.9, 0.8, 0.3, 0.1], [True, False, True, False]) == 0.75
    assert roc_auc([0.5, 0.5], [True, False]) == 0.5  # a tie counts half
    assert roc_auc([1, 2, 3], [False, False, True]) == 1.0
    assert roc_auc([1, 2], [True, True]) is None


def test_spearman_and_lowest_step():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    assert lowest_step([0.5, 0.1, 0.1]) == 1


def test_hide_labels_removes_every_label_and_keeps_the_rest():
    record = {
        "task": {"description": "d", "metadata": {"expected_actions": [1], "instruction": "secret", "user_id": "u"}},
        "steps": [{"tool_call": {"name": "x"}, "reward": 1.0, "metadata": {"mistake": True, "note": "kept"}}],
        "outcome": {"success": True},
        "reward": 1.0,
        "metadata": {"reward_info": {"reward": 1}, "source": "kept"},
    }
    hidden = hide_labels(record)
    assert "outcome" not in hidden and "reward" not in hidden and "reward" not in hidden["steps"][0]
    assert hidden["task"]["metadata"] == {"user_id": "u"}
    assert hidden["steps"][0]["metadata"] == {"note": "kept"}
    assert hidden["metadata"] == {"source": "kept"}
    assert record["outcome"] == {"success": True}  # the input is not touched


class Spy:
    """A scorer that records what it was shown and scores by a rule: reward = 1 - failures.

    It has only ``score(record)``, as scorers written before ``score_record`` do: evaluate takes it."""

    def __init__(self):
        self.seen = []

    def score(self, trajectory):
        self.seen.append(trajectory)
        return RewardEngine().score_record(trajectory)


def test_evaluate_never_shows_the_label_to_the_scorer(make_step):
    good = {
        "task": {"description": "run it"},
        "outcome": {"success": True, "score": 1.0},
        "steps": [make_step("bash", {"command": "make"}, "ok", exit_code=0)],
    }
    bad = {
        "task": {"description": "run it"},
        "outcome": {"success": False, "score": 0.0},
        "steps": [make_step("bash", {"command": "make"}, "boom", exit_code=2)],
    }
    spy = Spy()
    report = evaluate(spy, [good, bad, good, bad])
    assert all("outcome" not in t for t in spy.seen)
    assert report["auc"] == 1.0 and report["successes"] == 2 and report["spearman"] == pytest.approx(1.0)


def test_step_localisation_counts_the_lowest_step(make_step):
    read = make_step("read_file", {"path": "a.py"}, "x = 1")
    crash = make_step("bash", {"command": "python a.py"}, "Traceback (most recent call last):", exit_code=1)
    mistaken = dict(crash, metadata={"mistake": True})
    hit = {"task": {"description": "a.py"}, "steps": [read, mistaken]}
    miss = {"task": {"description": "a.py"}, "steps": [dict(read, metadata={"mistake": True}), crash]}
    report = evaluate(RewardEngine(), [hit, miss])
    assert report["labelled_steps"] == 2 and report["step_accuracy"] == 0.5 and report["step_chance"] == 0.5
    assert analyse(hit)[1].failed


def test_evaluate_without_labels_says_so(make_step):
    with pytest.raises(RewardError, match="no labels"):
        evaluate(RewardEngine(), [{"task": {}, "steps": [make_step("x")]}])
    with pytest.raises(RewardError, match="no trajectories"):
        evaluate(RewardEngine(), [])


def test_evaluate_on_the_real_tau_bench_runs_matches_the_cli(tmp_path):
    from agentreward.cli import main
    from knowlyrcore.testing import real_data

    source = real_data("tau-bench_gpt-4o-airline_tasks0-4.json")
    records = json.loads(source.read_text())
    assert sum(r["reward"] == 1.0 for r in records) == 2  # read off the file: 2 of 20 runs succeed
    assert main(["eval", str(source)]) == 2  # a raw tau-bench file is not trajectory JSONL: one error line
