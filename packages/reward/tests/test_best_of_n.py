"""best_of_n: pass@1, the reward's pick (ties shared) and the paired test, by hand."""

import pytest

from agentreward.best_of_n import best_of_n
from agentreward.errors import RewardError


def test_the_pick_and_pass1_by_hand():
    samples = {
        "a": [(0.9, True), (0.1, False), (0.2, False), (0.3, False)],  # pass@1 1/4, pick succeeds: +3/4
        "b": [(0.4, False), (0.8, True), (0.8, False), (0.1, True)],  # pass@1 2/4, tie at 0.8: 1/2, +0
        "c": [(0.5, False)] * 4,  # nothing succeeds: 0, 0
    }
    report = best_of_n(samples)
    assert report["n"] == 4 and report["tasks"] == 3
    assert report["pass1"] == pytest.approx((0.25 + 0.5 + 0) / 3, abs=1e-4)
    assert report["best"] == pytest.approx((1 + 0.5 + 0) / 3, abs=1e-4)
    assert report["gain"] == pytest.approx(0.75 / 3, abs=1e-4)
    # one non-zero difference (+0.75): the one-sided signed-rank p-value of a single positive rank is 1/2
    assert report["p_value"] == pytest.approx(0.5)


def test_a_reward_that_scores_everything_alike_gains_nothing():
    samples = {f"t{i}": [(0.5, i % 2 == 0), (0.5, True), (0.5, False)] for i in range(10)}
    report = best_of_n(samples)
    assert report["best"] == report["pass1"] and report["gain"] == 0 and report["p_value"] is None


def test_a_perfect_ranker_over_many_tasks_is_significant():
    samples = {f"t{i}": [(1.0, True), (0.0, False), (0.0, False), (0.0, False)] for i in range(12)}
    report = best_of_n(samples)
    assert report["best"] == 1.0 and report["pass1"] == 0.25
    assert report["p_value"] == pytest.approx(0.5**12, rel=1e-3)  # 12 positive differences of one size


def test_uneven_groups_and_no_tasks_are_refused():
    with pytest.raises(RewardError, match="same number of samples"):
        best_of_n({"a": [(1.0, True)], "b": [(1.0, True), (0.0, False)]})
    with pytest.raises(RewardError, match="at least one task"):
        best_of_n({})
