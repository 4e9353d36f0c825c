"""Advantages for online agent RL: group baselines (GRPO, Dr. GRPO, RLOO), per-step spreading, GAE.

Every estimator takes a group of ``G`` rollouts of one task. Rollouts masked out of the update
(infrastructure failures) pass ``valid=False``: they are left out of the group's statistics and
get advantage 0; a group with fewer than two valid members has no baseline and gives 0 to all.

- ``grpo``: ``A_i = (r_i - mean(r)) / (std(r) + eps)``, ``std`` unbiased (as TRL).
- ``dr_grpo``: ``A_i = r_i - mean(r)``: no division by the std (it over-weights groups that
  barely differ); the loss then also drops per-sequence length normalisation (``losses.grpo``).
- ``rloo``: ``A_i = r_i - mean_{j != i}(r_j) = G / (G - 1) * (r_i - mean(r))``, the
  leave-one-out baseline (unbiased: the baseline does not depend on ``r_i``).

- ``rft`` (rejection fine-tuning): ``A_i = 1`` if episode ``i`` succeeded, else 0. The first
  update on fresh samples then has the gradient of supervised fine-tuning on the successes
  (``-grad log p`` of their tokens): sample, keep what worked, imitate it.

``spread_over_steps`` turns a trajectory's advantage into per-step advantages that keep its
sign: steps get non-negative weights with mean 1, larger for good steps when ``A >= 0`` and
for bad steps when ``A < 0`` (step rewards in ``[0, 1]``, clamped). A failed trajectory's good
steps are thus blamed less than its bad ones, but no step of it is ever reinforced.

``gae`` is PPO's generalised advantage estimate over one rollout's model tokens, with a value
per token and rewards placed on tokens (step rewards on each step's last token, the outcome on
the final one).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

ALGORITHMS = ("grpo", "dr_grpo", "rloo", "ppo", "rft")
# How each algorithm's token losses add up (losses.grpo's ``normalization``): Dr. GRPO drops the
# per-episode length division; PPO and RFT average over every token of the step, as SFT does.
DEFAULT_NORMALIZATION = {"grpo": "sequence", "rloo": "sequence", "dr_grpo": "constant", "ppo": "token", "rft": "token"}
# Keeps every step's weight positive when its step reward is at the unfavourable end.
STEP_WEIGHT_FLOOR = 0.1


def group_baseline_advantages(
    rewards: Sequence[float], valid: Sequence[bool] | None = None, *, algorithm: str = "grpo", eps: float = 1e-4
) -> list[float]:
    """Advantages of one group of rollouts of the same task.

    Rewards ``[1, 0, 0, 1]`` (all valid): mean 0.5, unbiased std ``sqrt(4 * 0.25 / 3) = 0.57735``.
    ``grpo`` gives ``+-0.5 / 0.57745 = +-0.86588``; ``dr_grpo`` ``+-0.5``; ``rloo``
    ``1 - 1/3 = 0.66667`` and ``0 - 2/3 = -0.66667``.
    """
    if algorithm not in ("grpo", "dr_grpo", "rloo"):
        raise ValueError(f"group baselines are for grpo, dr_grpo and rloo, got {algorithm!r}")
    valid = [True] * len(rewards) if valid is None else list(valid)
    if len(valid) != len(rewards):
        raise ValueError(f"{len(rewards)} rewards but {len(valid)} valid flags")
    members = [float(r) for r, ok in zip(rewards, valid) if ok]
    out = [0.0] * len(rewards)
    n = len(members)
    if n < 2:
        return out
    mean = sum(members) / n
    if algorithm == "grpo":
        std = (sum((r - mean) ** 2 for r in members) / (n - 1)) ** 0.5
        scale = 1.0 / (std + eps)
    elif algorithm == "rloo":
        scale = n / (n - 1)
    else:
        scale = 1.0
    for i, (r, ok) in enumerate(zip(rewards, valid)):
        if ok:
            out[i] = (float(r) - mean) * scale
    return out


def rejection_advantages(successes: Sequence[bool | None], valid: Sequence[bool] | None = None) -> list[float]:
    """Rejection fine-tuning: 1 for a valid successful episode, 0 otherwise (failed, unknown, masked).

    ``[True, False, None, True]`` with the last masked gives ``[1, 0, 0, 0]``.
    """
    valid = [True] * len(successes) if valid is None else list(valid)
    if len(valid) != len(successes):
        raise ValueError(f"{len(successes)} outcomes but {len(valid)} valid flags")
    return [1.0 if ok and s is True else 0.0 for s, ok in zip(successes, valid)]


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


def gae(rewards: torch.Tensor, values: torch.Tensor, *, gamma: float = 1.0, lam: float = 0.95) -> torch.Tensor:
    """Generalised advantage estimates of one rollout's tokens ``(T,)``; the value after the last
    token is 0 (the episode ended or was cut; a cut episode's tail is not bootstrapped).

    ``delta_t = r_t + gamma * V_{t+1} - V_t``, ``A_t = delta_t + gamma * lam * A_{t+1}``.
    Rewards ``[0, 1]``, values ``[0.5, 0.25]``, ``gamma = 1``, ``lam = 0.5``:
    ``delta = [0 + 0.25 - 0.5, 1 + 0 - 0.25] = [-0.25, 0.75]``, ``A_1 = 0.75``,
    ``A_0 = -0.25 + 0.5 * 0.75 = 0.125``.
    """
    if rewards.shape != values.shape or rewards.dim() != 1:
        raise ValueError(f"rewards {tuple(rewards.shape)} and values {tuple(values.shape)} must be the same 1-D shape")
    advantages = torch.zeros_like(values, dtype=torch.float32)
    running, next_value = 0.0, 0.0
    for t in range(values.numel() - 1, -1, -1):
        delta = float(rewards[t]) + gamma * next_value - float(values[t])
        running = delta + gamma * lam * running
        advantages[t] = running
        next_value = float(values[t])
    return advantages


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, *, clip_range: float
) -> torch.Tensor:
    """PPO's clipped value loss ``0.5 * max((V - R)^2, (clip(V, V_old +- eps) - R)^2)``, token mean.

    One token, ``V = 1.0``, ``V_old = 0.5``, ``R = 0``, ``eps = 0.2``: unclipped ``1.0``, clipped
    ``V = 0.7`` gives ``0.49``; the max is ``1.0``, so the loss is ``0.5``.
    """
    mask = mask.to(values.dtype)
    clipped = old_values + (values - old_values).clamp(-clip_range, clip_range)
    per_token = 0.5 * torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
    return (per_token * mask).sum() / mask.sum().clamp(min=1)
