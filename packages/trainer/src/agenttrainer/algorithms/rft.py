"""RFT (rejection fine-tuning): advantage 1 for a successful episode, 0 for the rest.

The first update on fresh samples then has the gradient of supervised fine-tuning on the
successes (``-grad log p`` of their tokens, averaged over every token of the step:
``normalization="token"``): sample, keep what worked, imitate it. It reads the episodes'
outcomes, not their rewards, so it runs online only.
"""

from __future__ import annotations

from collections.abc import Sequence

from agenttrainer.algorithms.grpo import grpo_loss
from agenttrainer.algorithms.registry import Algorithm, register_algorithm


def rejection_advantages(successes: Sequence[bool | None], valid: Sequence[bool] | None = None) -> list[float]:
    """Rejection fine-tuning: 1 for a valid successful episode, 0 otherwise (failed, unknown, masked).

    ``[True, False, None, True]`` with the last masked gives ``[1, 0, 0, 0]``.
    """
    valid = [True] * len(successes) if valid is None else list(valid)
    if len(valid) != len(successes):
        raise ValueError(f"{len(successes)} outcomes but {len(valid)} valid flags")
    return [1.0 if ok and s is True else 0.0 for s, ok in zip(successes, valid)]


def rft_advantages(
    rewards: Sequence[float], successes: Sequence[bool | None], valid: Sequence[bool] | None = None
) -> list[float]:
    """The registry's form of ``rejection_advantages`` (the rewards are not read)."""
    return rejection_advantages(successes, valid)


RFT = register_algorithm(
    Algorithm(
        name="rft",
        summary="rejection fine-tuning: the likelihood of the successful episodes is raised, failures are left out",
        loss=grpo_loss,
        advantages=rft_advantages,
        normalization="token",
        group_baseline=False,
    )
)
