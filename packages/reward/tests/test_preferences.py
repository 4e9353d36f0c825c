import pytest

from agentreward import build_preference_pairs
from agentreward.errors import TrajectoryFormatError
from knowlyrcore import read_jsonl, write_jsonl
from knowlyrcore.datasets import PreferenceRecord

STEP = {"index": 0, "tool_call": {"name": "ls"}}


def t(tid, task, reward, success=None, steps=(STEP,)):
    return {"id": tid, "task": {"id": task}, "steps": list(steps), "reward": reward, "outcome": {"success": success}}


def _ids(pairs):
    return [(p.chosen.id, p.rejected.id, p.margin) for p in pairs]


def test_default_pairs_each_tasks_best_against_its_worst():
    pairs = build_preference_pairs([t("a", "x", 0.9), t("b", "x", 0.5), t("c", "x", 0.85), t("d", "y", 0.1)])
    assert _ids(pairs) == [("a", "b", pytest.approx(0.4))]  # y has one attempt


def test_all_above_margin_pairs_every_two_by_margin():
    items = [t("a", "x", 0.9), t("b", "x", 0.5), t("c", "x", 0.85), t("d", "y", 0.1)]
    assert _ids(build_preference_pairs(items, pairing="all_above_margin")) == [
        ("a", "b", pytest.approx(0.4)),
        ("c", "b", pytest.approx(0.35)),
    ]  # a-c margin 0.05 < 0.1; y has one


def test_max_pairs_per_task_keeps_largest_margins():
    items = [t("a", "x", 1.0), t("b", "x", 0.5), t("c", "x", 0.0)]
    pairs = build_preference_pairs(items, pairing="all_above_margin", max_pairs_per_task=1)
    assert len(pairs) == 1 and (pairs[0].chosen.id, pairs[0].rejected.id) == ("a", "c")


def test_a_failed_trajectory_is_never_the_chosen_one():
    """Before: all_above_margin chose failures over worse failures (the hub never did)."""
    items = [t("a", "x", 0.9, success=False), t("b", "x", 0.5, success=True), t("c", "x", 0.1, success=False)]
    assert _ids(build_preference_pairs(items, pairing="all_above_margin")) == [("b", "c", pytest.approx(0.4))]
    assert build_preference_pairs(items) == []  # the best attempt failed


def test_ties_taskless_and_stepless_trajectories_give_no_pairs():
    assert build_preference_pairs([t("a", "x", 0.5), t("b", "x", 0.5)], min_margin=0) == []
    assert build_preference_pairs([t("a", "", 1.0), t("b", "", 0.0)]) == []
    # as in knowlyr-hub: a trajectory without steps has no completion to train on
    assert _ids(build_preference_pairs([t("a", "x", 1.0), t("b", "x", 0.0, steps=()), t("c", "x", 0.5)])) == [
        ("a", "c", 0.5)
    ]


def test_pairs_are_preference_records_that_keep_the_sampled_tokens(tmp_path):
    """Before: plain dicts. Now the records knowlyr-hub's ``export --format dpo -p`` reads, the
    steps' sampled token ids and log-probs kept through the file."""
    sampled = {**STEP, "token_ids": [5, 6, 7], "logprobs": [-0.5, -1.0, -0.25], "reward": 0.9}
    pairs = build_preference_pairs([t("a", "x", 0.9, steps=[sampled]), t("b", "x", 0.2)])
    assert all(isinstance(p, PreferenceRecord) for p in pairs)
    write_jsonl(tmp_path / "pairs.jsonl", pairs)
    (read,) = read_jsonl(tmp_path / "pairs.jsonl", PreferenceRecord)
    assert read == pairs[0] and read.task_id == "x" and read.margin == 0.7
    assert (read.chosen.steps[0].token_ids, read.chosen.steps[0].logprobs) == ([5, 6, 7], [-0.5, -1.0, -0.25])


def test_a_trajectory_the_schema_refuses_is_named():
    with pytest.raises(TrajectoryFormatError, match=r"^trajectory 'b': steps\[0\]\.index: Input should be"):
        build_preference_pairs([t("a", "x", 1.0), t("b", "x", 0.0, steps=[{**STEP, "index": "first"}])])


def test_unscored_input_is_an_error():
    with pytest.raises(ValueError, match="no reward: score it first"):
        build_preference_pairs([{"id": "a", "task": {"id": "x"}, "steps": []}])
    with pytest.raises(ValueError, match="pairing must be one of best_vs_worst, all_above_margin"):
        build_preference_pairs([t("a", "x", 1.0)], pairing="random")
