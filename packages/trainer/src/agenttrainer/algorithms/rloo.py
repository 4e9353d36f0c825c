"""RLOO (REINFORCE leave-one-out): each episode's baseline is the mean reward of the others.

``A_i = r_i - mean_{j != i}(r_j) = G / (G - 1) * (r_i - mean(r))``: unbiased, since the baseline
does not depend on ``r_i``. The loss is GRPO's clipped surrogate, averaged per sequence.
"""

from __future__ import annotations

from collections.abc import Sequence

from agenttrainer.algorithms.grpo import grpo_loss
from agenttrainer.algorithms.registry import Algorithm, baseline_advantages, register_algorithm


def rloo_advantages(
    rewards: Sequence[float], successes: Sequence[bool | None] | None = None, valid: Sequence[bool] | None = None
) -> list[float]:
    """Leave-one-out advantages of one group's valid members.

    Rewards ``[1, 0, 0, 1]``: ``1 - 1/3 = 0.66667`` and ``0 - 2/3 = -0.66667``.
    """
    return baseline_advantages(rewards, valid, lambda members, mean: len(members) / (len(members) - 1))


RLOO = register_algorithm(
    Algorithm(
        name="rloo",
        summary="leave-one-out baseline: r_i - mean of the group's other rewards",
        loss=grpo_loss,
        advantages=rloo_advantages,
        normalization="sequence",
    )
)
