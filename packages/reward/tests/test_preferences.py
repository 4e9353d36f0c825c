import pytest

from agentreward import build_preference_pairs


def t(tid, task, reward, success=None):
    return {"id": tid, "task": {"id": task}, "steps": [], "reward": reward, "outcome": {"success": success}}


def _ids(pairs):
    return [(p["chosen"]["id"], p["rejected"]["id"], p["margin"]) for p in pairs]


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
    assert len(pairs) == 1 and (pairs[0]["chosen"]["id"], pairs[0]["rejected"]["id"]) == ("a", "c")


def test_a_failed_trajectory_is_never_the_chosen_one():
    """Before: all_above_margin chose failures over worse failures (the hub never did)."""
    items = [t("a", "x", 0.9, success=False), t("b", "x", 0.5, success=True), t("c", "x", 0.1, success=False)]
    assert _ids(build_preference_pairs(items, pairing="all_above_margin")) == [("b", "c", pytest.approx(0.4))]
    assert build_preference_pairs(items) == []  # the best attempt failed


def test_ties_and_taskless_trajectories_give_no_pairs():
    assert build_preference_pairs([t("a", "x", 0.5), t("b", "x", 0.5)], min_margin=0) == []
    assert build_preference_pairs([t("a", "", 1.0), t("b", "", 0.0)]) == []


def test_unscored_input_is_an_error():
    with pytest.raises(ValueError, match="no reward: score it first"):
        build_preference_pairs([{"id": "a", "task": {"id": "x"}, "steps": []}])
    with pytest.raises(ValueError, match="pairing must be one of best_vs_worst, all_above_margin"):
        build_preference_pairs([t("a", "x", 1.0)], pairing="random")
