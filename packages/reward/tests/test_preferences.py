import pytest

from agentreward import build_preference_pairs


def t(tid, task, reward):
    return {"id": tid, "task": {"id": task}, "steps": [], "reward": reward}


def test_pairs_within_a_task_by_margin():
    pairs = build_preference_pairs([t("a", "x", 0.9), t("b", "x", 0.5), t("c", "x", 0.85), t("d", "y", 0.1)])
    assert [(p["chosen"]["id"], p["rejected"]["id"], p["margin"]) for p in pairs] == [
        ("a", "b", pytest.approx(0.4)),
        ("c", "b", pytest.approx(0.35)),
    ]  # a-c margin 0.05 < 0.1; y has one


def test_max_pairs_per_task_keeps_largest_margins():
    pairs = build_preference_pairs([t("a", "x", 1.0), t("b", "x", 0.5), t("c", "x", 0.0)], max_pairs_per_task=1)
    assert len(pairs) == 1 and (pairs[0]["chosen"]["id"], pairs[0]["rejected"]["id"]) == ("a", "c")


def test_ties_and_taskless_trajectories_give_no_pairs():
    assert build_preference_pairs([t("a", "x", 0.5), t("b", "x", 0.5)], min_margin=0) == []
    assert build_preference_pairs([t("a", "", 1.0), t("b", "", 0.0)]) == []


def test_unscored_input_is_an_error():
    with pytest.raises(ValueError, match="no reward: score it first"):
        build_preference_pairs([{"id": "a", "task": {"id": "x"}, "steps": []}])
