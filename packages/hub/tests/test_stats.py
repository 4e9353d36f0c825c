"""Statistics against numbers derived by hand (derivations in the docstrings)."""

import doctest
import importlib
from types import SimpleNamespace

import pytest

from trajectoryhub.stats import (
    bonferroni,
    mcnemar_exact,
    pair_by_task,
    paired_ttest,
    wilcoxon_signed_rank,
    wilson_interval,
)

Z2 = 1.959963984540054**2  # z_{0.975}^2 = 3.841459


def test_wilson_7_of_10():
    """p = 0.7, n = 10, z^2 = 3.841459:
    centre = (p + z^2/2n) / (1 + z^2/n) = 0.892073 / 1.384146 = 0.644493,
    half   = z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n) = 1.959964 * sqrt(0.0306037) / 1.384146 = 0.247715,
    so the interval is [0.396778, 0.892209] (0.3968, 0.8922 in the usual tables)."""
    lo, hi = wilson_interval(7, 10)
    assert lo == pytest.approx(0.396778, abs=1e-6)
    assert hi == pytest.approx(0.892209, abs=1e-6)


def test_wilson_at_the_edges_stays_in_unit_interval():
    """For 0/n the centre and the half width are both (z^2/2n) / (1 + z^2/n), so the interval is
    [0, z^2 / (n + z^2)]: for n = 10, 3.841459 / 13.841459 = 0.277533. 10/10 mirrors it."""
    assert wilson_interval(0, 10) == pytest.approx((0.0, Z2 / (10 + Z2)))
    assert wilson_interval(10, 10) == pytest.approx((1 - Z2 / (10 + Z2), 1.0))
    with pytest.raises(ValueError, match="at least one"):
        wilson_interval(0, 0)
    with pytest.raises(ValueError, match="between 0 and n"):
        wilson_interval(11, 10)


def test_mcnemar_exact_b8_c1():
    """b = 8 tasks only A solved, c = 1 only B solved. Under H0 each discordant task is a fair
    coin: P(X <= 1 | Bin(9, 1/2)) = (C(9,0) + C(9,1)) / 2^9 = 10/512, two-sided p = 20/512
    = 0.0390625. Concordant tasks (both solved, both failed) do not change it."""
    a = [True] * 8 + [False] + [True] * 5 + [False] * 3
    b = [False] * 8 + [True] + [True] * 5 + [False] * 3
    result = mcnemar_exact(a, b)
    assert result == {"a_only": 8, "b_only": 1, "p_value": pytest.approx(20 / 512)}
    assert mcnemar_exact(b, a)["p_value"] == pytest.approx(20 / 512)


def test_mcnemar_without_discordant_pairs_has_no_evidence():
    assert mcnemar_exact([True, False], [True, False])["p_value"] == 1.0
    with pytest.raises(ValueError, match="length"):
        mcnemar_exact([True], [True, False])


def test_paired_ttest_hand_derived():
    """b - a = [1, 2, 3]: mean 2, sample sd 1, t = 2 / (1/sqrt 3) = 3.4641 on 2 df. For 2 df the
    tail has a closed form, P(T > t) = (1 - t / sqrt(t^2 + 2)) / 2 = (1 - 3.4641/3.7417) / 2
    = 0.037090, so p = 0.074180."""
    assert paired_ttest([1, 1, 1], [2, 3, 4]) == pytest.approx(0.074180, abs=1e-6)


def test_paired_ttest_degenerate_differences():
    assert paired_ttest([0.5, 0.2, 0.9], [0.5, 0.2, 0.9]) == 1.0  # all differences zero
    assert paired_ttest([0.1, 0.2], [0.6, 0.7]) == 0.0  # constant 0.5 difference: t is infinite
    assert paired_ttest([0.1], [0.9]) == 1.0  # one pair cannot be tested


def test_wilcoxon_hand_derived():
    """b - a = [1, 2, 3, 4, 5], all positive: W- = 0. Of the 2^5 equally likely sign patterns
    only 'all +' gives W- = 0 and only 'all -' gives W+ = 0, so p = 2/32 = 0.0625.
    With three differences the same argument gives 2/8 = 0.25."""
    assert wilcoxon_signed_rank([0] * 5, [1, 2, 3, 4, 5]) == pytest.approx(0.0625)
    assert wilcoxon_signed_rank([1, 1, 1], [2, 3, 4]) == pytest.approx(0.25)


def test_wilcoxon_all_zero_differences():
    assert wilcoxon_signed_rank([0.3, 0.4], [0.3, 0.4]) == 1.0


def test_bonferroni():
    assert bonferroni([0.01, 0.02, 0.5]) == pytest.approx([0.03, 0.06, 1.0])
    assert bonferroni([0.01], n_comparisons=4) == pytest.approx([0.04])


def test_pair_by_task_matches_attempts_in_order():
    def item(task, tag):
        return SimpleNamespace(task=SimpleNamespace(id=task), tag=tag)

    a = [item("t1", "a1"), item("t2", "a2"), item("t1", "a1'"), item("", "a?"), item("t3", "a3")]
    b = [item("t1", "b1"), item("t2", "b2"), item("", "b?"), item("t4", "b4")]
    pairs = [(x.tag, y.tag) for x, y in pair_by_task(a, b)]
    assert pairs == [("a1", "b1"), ("a2", "b2")]  # t1's second attempt has no partner; no ids, no pairs


def test_doctests():
    result = doctest.testmod(importlib.import_module("trajectoryhub.stats"))
    assert result.attempted >= 2 and result.failed == 0
