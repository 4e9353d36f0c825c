"""Statistics for evaluating policies: intervals and paired tests, all through scipy.stats.

* ``wilson_interval``: the Wilson score interval of a success rate (good at small n and at
  rates near 0 or 1, where the normal interval leaves [0, 1] or collapses to a point).
* ``mcnemar_exact``: two policies run on the same tasks; only the discordant tasks (one
  succeeded, the other failed) carry information, and under "no difference" each is a fair
  coin flip, so the exact test is a two-sided binomial test on them.
* ``paired_ttest`` / ``wilcoxon_signed_rank``: the same question on per-task rewards.
* ``bonferroni``: multiply p-values by the number of comparisons (capped at 1).
* ``pair_by_task``: line up two runs by task id (the k-th attempt of a task in one run with the
  k-th attempt in the other).

Degenerate inputs get the p-value the data support rather than a NaN: no discordant pairs or
all-zero differences mean no evidence of a difference (p = 1); fewer than two pairs cannot be
tested (p = 1); a constant non-zero reward difference has zero variance and an infinite t
statistic (p = 0).

Examples:
    >>> [round(x, 4) for x in wilson_interval(7, 10)]
    [0.3968, 0.8922]
    >>> mcnemar_exact([True] * 8 + [False], [False] * 8 + [True])["p_value"]
    0.0390625
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from knowlyrcore.lazy import lazy_import

stats = lazy_import("scipy.stats")  # ~1 s to import: loaded when a test statistic is computed

T = TypeVar("T")


def wilson_interval(successes: int, n: int, *, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for ``successes`` out of ``n`` Bernoulli trials."""
    if n < 1:
        raise ValueError("a success rate needs at least one episode")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be between 0 and n={n}, got {successes}")
    ci = stats.binomtest(int(successes), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> dict[str, Any]:
    """Exact McNemar test on paired outcomes: ``{"a_only", "b_only", "p_value"}``.

    ``a_only`` counts pairs where only ``a`` succeeded, ``b_only`` where only ``b`` did.
    """
    if len(a) != len(b):
        raise ValueError(f"paired outcomes differ in length: {len(a)} and {len(b)}")
    a_only = sum(bool(x) and not bool(y) for x, y in zip(a, b))
    b_only = sum(bool(y) and not bool(x) for x, y in zip(a, b))
    discordant = a_only + b_only
    p = 1.0 if discordant == 0 else float(stats.binomtest(a_only, discordant, 0.5).pvalue)
    return {"a_only": a_only, "b_only": b_only, "p_value": p}


def _differences(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} and {len(b)}")
    return np.asarray(b, dtype=float) - np.asarray(a, dtype=float)


def paired_ttest(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the paired t-test of ``b - a``."""
    diffs = _differences(a, b)
    if len(diffs) < 2:
        return 1.0
    if np.ptp(diffs) < 1e-12:  # zero variance: t is 0/0 (no difference) or infinite (a sure one)
        return 1.0 if abs(diffs[0]) < 1e-12 else 0.0
    return float(stats.ttest_rel(b, a).pvalue)


def wilcoxon_signed_rank(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Wilcoxon signed-rank test of ``b - a`` (zero differences dropped)."""
    diffs = _differences(a, b)
    if not np.any(np.abs(diffs) > 1e-12):
        return 1.0
    return float(stats.wilcoxon(diffs).pvalue)


def bonferroni(p_values: Sequence[float], n_comparisons: int | None = None) -> list[float]:
    """Bonferroni-adjusted p-values: ``min(1, p * m)``, ``m`` defaulting to ``len(p_values)``."""
    m = len(p_values) if n_comparisons is None else n_comparisons
    return [min(1.0, float(p) * m) for p in p_values]


def pair_by_task(a: Sequence[T], b: Sequence[T], *, key=lambda t: t.task.id) -> list[tuple[T, T]]:
    """Pairs ``(x, y)`` of items with the same task id, the k-th of a task in ``a`` with the k-th in ``b``.

    Items without a task id, and attempts one run has more of, stay unpaired.
    """
    queues: dict[str, list[T]] = defaultdict(list)
    for item in b:
        if key(item):
            queues[key(item)].append(item)
    pairs = []
    for item in a:
        queue = queues.get(key(item))
        if queue:
            pairs.append((item, queue.pop(0)))
    return pairs
