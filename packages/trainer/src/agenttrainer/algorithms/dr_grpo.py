"""Dr. GRPO ("GRPO done right"): advantages ``r_i - mean(r)``, token losses over a fixed budget.

GRPO's division by the group's reward std over-weights groups whose rewards barely differ, and
its per-sequence token mean down-weights every token of a long answer. Dr. GRPO drops both: the
advantage is ``r_i - mean(r)`` and each sequence's token losses are summed and divided by the
same constant (``normalization="constant"``: online RL's ``max_steps * max_new_tokens``, offline
the ``max_length``), then averaged over sequences. The loss is GRPO's clipped surrogate.
"""

from __future__ import annotations

from collections.abc import Sequence

from agenttrainer.algorithms.grpo import grpo_loss
from agenttrainer.algorithms.registry import Algorithm, baseline_advantages, register_algorithm


def dr_grpo_advantages(
    rewards: Sequence[float], successes: Sequence[bool | None] | None = None, valid: Sequence[bool] | None = None
) -> list[float]:
    """``r_i - mean(r)`` over the valid members of one group: rewards ``[1, 0, 0, 1]`` give ``+-0.5``."""
    return baseline_advantages(rewards, valid, lambda members, mean: 1.0)


DR_GRPO = register_algorithm(
    Algorithm(
        name="dr_grpo",
        summary="advantages r - mean (no std), token losses summed over a fixed token budget",
        loss=grpo_loss,
        advantages=dr_grpo_advantages,
        normalization="constant",
    )
)
