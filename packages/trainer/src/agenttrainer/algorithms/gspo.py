"""GSPO (Group Sequence Policy Optimization): one importance ratio per sequence, clipped per sequence.

GRPO weighs each token by its own ratio, a one-sample estimate that is noisy and compounds over
long answers. GSPO (Zheng et al., 2025) weighs a whole sequence by its length-normalised
likelihood ratio and clips that:

``s_i = exp(mean_t(logp_t - old_logp_t))`` over the sequence's completion tokens,
``l_i = -min(s_i * A_i, clip(s_i, 1 - eps, 1 + eps_high) * A_i)``,

with GRPO's group-normalised advantages ``A_i = (r_i - mean(r)) / (std(r) + eps)``. Per-token
advantages (``step_level_advantage``) use the paper's GSPO-token form: token ``t`` gets
``r_t = sg[s_i] * exp(logp_t - sg[logp_t])`` (value ``s_i``, gradient ``s_i * grad logp_t``) and
the loss ``-min(r_t * A_t, clip(r_t) * A_t)``; with one advantage per sequence its per-sequence
token mean is ``l_i``, gradient included. The k3 KL and the normalizations are GRPO's
(``grpo_loss`` with ``ratio=sequence_ratio``). Sequence ratios stay much closer to 1 than token
ratios: the paper clips at ``clip_eps`` 3e-4 / ``clip_eps_high`` 4e-4.
"""

from __future__ import annotations

from typing import Any

import torch

from agenttrainer.algorithms.grpo import grpo_advantages, grpo_loss
from agenttrainer.algorithms.registry import Algorithm, register_algorithm


def sequence_ratio(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's importance ratio ``(B, T)``: on every token of sequence ``i`` the value
    ``s_i = exp(mean_t(logp_t - old_logp_t))`` over its completion tokens, the gradient
    ``s_i * grad logp_t`` (the GSPO-token form)."""
    weights = mask.to(logps.dtype)
    lengths = weights.sum(dim=1).clamp(min=1)  # (B,)
    log_ratio = ((logps - old_logps) * weights).sum(dim=1) / lengths  # (B,): log s_i
    return torch.exp(log_ratio.detach()[:, None] + logps - logps.detach())  # (B, T): value s_i per token


def gspo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    ref_logps: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    **options: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The sequence-ratio clipped surrogate + k3 KL: ``grpo_loss`` with ``sequence_ratio``;
    arguments and ``options`` (``clip_eps``, ``kl_coef``, ...) as ``grpo_loss``'s.

    Hand-derived in ``packages/trainer/tests/test_gspo.py``: two sequences of two tokens, ``A = (+a, -a)``; sequence
    1 has log-ratios ``(ln 1.21, 0)``, so ``s_1 = exp(ln 1.21 / 2) = 1.1``, inside ``[0.8, 1.2]``;
    sequence 2 ``(ln 0.25, 0)``, so ``s_2 = 0.5``, clipped to 0.8 against its negative advantage.
    """
    return grpo_loss(logps, old_logps, ref_logps, advantages, mask, ratio=sequence_ratio, name="gspo", **options)


GSPO = register_algorithm(
    Algorithm(
        name="gspo",
        summary="GRPO's advantages, one ratio per sequence (exp of its mean token log-ratio) clipped per sequence",
        loss=gspo_loss,
        advantages=grpo_advantages,
        normalization="sequence",
    )
)
