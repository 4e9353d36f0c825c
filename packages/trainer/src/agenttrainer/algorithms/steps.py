"""An episode's advantage spread over its steps by their process rewards.

- ``spread_over_steps`` (online RL, ``step_level_advantage``): per-step advantages that keep the
  episode's sign: steps get non-negative weights with mean 1, larger for good steps when
  ``A >= 0`` and for bad steps when ``A < 0`` (step rewards in ``[0, 1]``, clamped). A failed
  trajectory's good steps are thus blamed less than its bad ones, but no step of it is ever
  reinforced.
- ``step_level_advantages`` (offline GRPO, ``step_level_advantage``): ``A_ij = A_i * r_step_j /
  mean(r_steps_i)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from agenttrainer.losses.sft import step_weights

# Keeps every step's weight positive when its step reward is at the unfavourable end.
STEP_WEIGHT_FLOOR = 0.1


def spread_over_steps(advantage: float, step_rewards: Sequence[float]) -> list[float]:
    """Per-step advantages with the trajectory's sign and mean ``advantage``.

    ``s_j = clamp(r_j, 0, 1)`` if ``A >= 0`` else ``1 - clamp(r_j, 0, 1)``;
    ``w_j = (FLOOR + s_j) / mean(FLOOR + s)``; ``A_j = A * w_j``. With ``A = 2`` and step
    rewards ``[0.9, 0.3]``: ``s = [0.9, 0.3]``, ``FLOOR + s = [1.0, 0.4]``, mean 0.7, so
    ``[2.85714, 1.14286]``. With ``A = -2``: ``s = [0.1, 0.7]``, ``[0.2, 0.8]`` / 0.5, so
    ``[-0.8, -3.2]`` (the bad step carries the blame).
    """
    if not step_rewards:
        return []
    clamped = [min(max(float(r), 0.0), 1.0) for r in step_rewards]
    scores = [STEP_WEIGHT_FLOOR + (c if advantage >= 0 else 1.0 - c) for c in clamped]
    mean = sum(scores) / len(scores)
    return [advantage * s / mean for s in scores]


def step_level_advantages(advantage: float, step_rewards: Sequence[float]) -> list[float]:
    """``A_ij = A_i * r_step_j / mean(r_steps)``; ``A_i = 2`` with step rewards ``[0.7, 0.9]`` gives ``[1.75, 2.25]``."""
    return [advantage * w for w in step_weights(step_rewards)]
