"""Best-of-n at test time: does keeping the answer a reward model ranks highest beat a random one?

Given ``n`` sampled runs per task, each with its reward (scored with the outcome hidden) and its
real outcome, :func:`best_of_n` compares two numbers per task:

- **pass@1**, the chance that one sample succeeds: the task's success rate over its samples;
- **best**, whether the sample with the highest reward succeeded. Ties share the choice: when
  several samples share the highest reward, best is their success rate, what picking one of
  them at random gives, so a reward that scores everything alike gains nothing.

The paired test is Wilcoxon's signed-rank test on the per-task differences ``best - pass@1``
(one-sided: best-of-n is better); tasks where the two agree carry no information and are
dropped (``zero_method="wilcox"``).

Examples:
    >>> report = best_of_n({"t1": [(0.9, True), (0.2, False)], "t2": [(0.5, False), (0.5, True)]})
    >>> report["n"], report["pass1"], report["best"]
    (2, 0.5, 0.75)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentreward.errors import RewardError
from knowlyrcore.lazy import lazy_import

stats = lazy_import("scipy.stats")


def best_of_n(samples: Mapping[str, Sequence[tuple[float, bool]]]) -> dict[str, float | int | None]:
    """``{"n", "tasks", "pass1", "best", "gain", "p_value"}`` over ``{task: [(reward, success), ...]}``."""
    if not samples:
        raise RewardError("best_of_n needs sampled runs of at least one task")
    sizes = {len(runs) for runs in samples.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise RewardError(f"every task needs the same number of samples, got {sorted(sizes)}")
    pass1: list[float] = []
    best: list[float] = []
    for runs in samples.values():
        pass1.append(sum(success for _, success in runs) / len(runs))
        top = max(reward for reward, _ in runs)
        chosen = [success for reward, success in runs if reward == top]
        best.append(sum(chosen) / len(chosen))
    differences = [b - p for b, p in zip(best, pass1)]
    p_value = None
    if any(d != 0 for d in differences):
        p_value = float(stats.wilcoxon(differences, zero_method="wilcox", alternative="greater").pvalue)
    mean_pass1, mean_best = sum(pass1) / len(pass1), sum(best) / len(best)
    return {
        "n": sizes.pop(),
        "tasks": len(samples),
        "pass1": round(mean_pass1, 4),
        "best": round(mean_best, 4),
        "gain": round(mean_best - mean_pass1, 4),
        "p_value": None if p_value is None else float(f"{p_value:.4g}"),  # small p-values keep their digits
    }
