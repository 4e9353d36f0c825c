"""PPO: a value head, GAE over the model's tokens, the clipped surrogate and a clipped value loss.

The policy term is GRPO's token-level clipped surrogate (``grpo_loss``) averaged over every token
of the step (``normalization="token"``); the advantages are per token, from ``gae`` over a value
per token (the driver's value head on the policy's last hidden state; rewards placed on tokens:
step rewards on each step's last token, the outcome on the final one), whitened over the batch;
``value_loss`` trains the head. PPO compares no episodes, so a group may hold one.
"""

from __future__ import annotations

import torch

from agenttrainer.algorithms.grpo import grpo_loss
from agenttrainer.algorithms.registry import Algorithm, register_algorithm


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


def whiten(advantages: list[torch.Tensor], eps: float = 1e-8) -> list[torch.Tensor]:
    """Per-rollout advantages shifted and scaled by the mean and std of all of them together."""
    flat = torch.cat(advantages)
    mean, std = flat.mean(), flat.std() if flat.numel() > 1 else torch.tensor(1.0)
    return [(a - mean) / (std + eps) for a in advantages]


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


PPO = register_algorithm(
    Algorithm(
        name="ppo",
        summary="value head, GAE over the model's tokens, clipped surrogate + clipped value loss",
        loss=grpo_loss,
        advantages=None,
        normalization="token",
        group_baseline=False,
        value_head=True,
    )
)
