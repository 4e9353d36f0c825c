"""GRPO (Group Relative Policy Optimisation): group-normalised advantages, clipped surrogate, k3 KL.

For a group of ``G`` episodes of one task with rewards ``r_1..r_G``:
``A_i = (r_i - mean(r)) / (std(r) + eps)`` (``std`` unbiased, as in TRL).

Per completion token ``t`` with ratio ``rho = exp(logp - old_logp)``:
``l_t = -min(rho * A, clip(rho, 1 - eps_clip, 1 + eps_high) * A) + kl_coef * kl_t`` with the k3
estimator ``kl_t = exp(ref - logp) - (ref - logp) - 1`` (unbiased, always >= 0). Each sequence's
token losses are averaged over its completion tokens, then summed over sequences and divided by
``num_items`` (the number of sequences in the optimizer step) — TRL's ``loss_type="grpo"``.
``eps_high`` defaults to ``eps_clip``; a larger one ("clip-higher", as in DAPO: 0.2 / 0.28) lets
the probability of a rare good token grow further in one update, which keeps the policy from
collapsing onto what it already does (entropy collapse) while bad tokens stay tightly clipped.

``grpo_loss`` is that objective for any ratio: PPO, RLOO, Dr. GRPO and RFT score tokens with it
(their own advantages, another ``normalization``), GSPO with a ratio per sequence (``ratio``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from agenttrainer.algorithms.registry import Algorithm, baseline_advantages, register_algorithm


def group_advantages(rewards: torch.Tensor, group_size: int, *, eps: float = 1e-4) -> torch.Tensor:
    """Normalise rewards within consecutive groups of ``group_size`` (a tensor version of
    ``grpo_advantages`` for whole batches of equal groups).

    Rewards ``[1, 0, 0.5, 0.5]`` with ``group_size=2``: group 1 has mean 0.5 and unbiased std
    ``sqrt(((0.5)^2 + (0.5)^2) / 1) = 0.70711``, so ``A = +-0.5 / (0.70711 + 1e-4) = +-0.70701``;
    group 2 has std 0, so ``A = 0``.
    """
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    grouped = rewards.view(-1, group_size).float()  # (num_groups, G)
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean)
    return ((grouped - mean) / (std + eps)).view(-1)


def grpo_advantages(
    rewards: Sequence[float],
    successes: Sequence[bool | None] | None = None,
    valid: Sequence[bool] | None = None,
    *,
    eps: float = 1e-4,
) -> list[float]:
    """``(r_i - mean(r)) / (std(r) + eps)`` over the valid members of one group (``successes`` unused).

    Rewards ``[1, 0, 0, 1]``: mean 0.5, unbiased std ``sqrt(4 * 0.25 / 3) = 0.57735``, so
    ``+-0.5 / 0.57745 = +-0.86588``.
    """

    def scale(members: list[float], mean: float) -> float:
        std = (sum((r - mean) ** 2 for r in members) / (len(members) - 1)) ** 0.5
        return 1.0 / (std + eps)

    return baseline_advantages(rewards, valid, scale)


RatioFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def token_ratio(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GRPO's importance ratio, one per token: ``rho_t = exp(logp_t - old_logp_t)`` ``(B, T)``."""
    return torch.exp(logps - old_logps)


def grpo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    ref_logps: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    kl_coef: float = 0.04,
    num_items: float | None = None,
    normalization: str = "sequence",
    max_tokens: int | None = None,
    ratio: RatioFn = token_ratio,
    name: str = "grpo",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate + k3 KL, per-sequence token mean, summed and divided by ``num_items``.

    ``normalization`` says how token losses become the loss: ``"sequence"`` (above; GRPO),
    ``"constant"`` (Dr. GRPO: every sequence's token losses summed and divided by the same
    ``max_tokens``, so long answers are not down-weighted per token; then divided by
    ``num_items``) or ``"token"`` (PPO: mean over every counted token of the step, ``num_items``
    being that token count).

    Args:
        logps: per-token log-probs ``(B, T)`` of the completion tokens under the policy.
        old_logps: the same under the policy that sampled them.
        ref_logps: the same under the reference model (None: no KL term).
        advantages: ``(B,)`` per trajectory or ``(B, T)`` per token (step-level advantages).
        mask: ``(B, T)``, 1 on completion tokens that count.
        ratio: ``(logps, old_logps, mask) -> (B, T)`` importance ratios (GSPO passes one per sequence).
        name: the metric ``loss/<name>`` holds the mean per-sequence loss.

    Hand-derived check (used by the unit test): one sequence, two tokens, ``A = 1``,
    ``logp - old = (ln 1.5, 0)``, ``clip_eps = 0.2``, ``ref = logp - ln 2`` on both tokens.
    Token 1: ``rho = 1.5``, ``min(1.5, 1.2) = 1.2``; token 2: ``rho = 1``. Surrogate
    ``= -(1.2 + 1) / 2 = -1.1``. ``kl = e^{-ln 2} + ln 2 - 1 = 0.5 + 0.69315 - 1 = 0.19315`` per
    token, so with ``kl_coef = 0.1`` the loss is ``-1.1 + 0.019315 = -1.080685``. With
    ``clip_eps_high = 0.28`` token 1 is clipped at 1.28 instead: ``-(1.28 + 1) / 2 = -1.14``.
    """
    rho = ratio(logps, old_logps, mask)  # (B, T)
    high = clip_eps if clip_eps_high is None else clip_eps_high
    mask = mask.to(logps.dtype)
    if advantages.dim() == 1:
        advantages = advantages[:, None]  # (B, 1)
    clipped = torch.clamp(rho, 1 - clip_eps, 1 + high)
    pg = -torch.min(rho * advantages, clipped * advantages)  # (B, T)
    per_token = pg
    kl = None
    if kl_coef != 0.0:
        if ref_logps is None:
            raise ValueError("ref_logps is required when kl_coef != 0")
        diff = ref_logps - logps
        kl = torch.exp(diff) - diff - 1  # (B, T)
        per_token = pg + kl_coef * kl
    lengths = mask.sum(dim=1).clamp(min=1)  # (B,)
    if normalization == "sequence":
        per_seq = (per_token * mask).sum(dim=1) / lengths  # (B,)
        loss = per_seq.sum() / (per_seq.numel() if num_items is None else num_items)
    elif normalization == "constant":
        if not max_tokens:
            raise ValueError("normalization='constant' needs max_tokens")
        per_seq = (per_token * mask).sum(dim=1) / max_tokens  # (B,)
        loss = per_seq.sum() / (per_seq.numel() if num_items is None else num_items)
    elif normalization == "token":
        per_seq = (per_token * mask).sum(dim=1) / lengths  # (B,), for the metric only
        loss = (per_token * mask).sum() / (mask.sum().clamp(min=1) if num_items is None else num_items)
    else:
        raise ValueError(f"normalization must be 'sequence', 'constant' or 'token', got {normalization!r}")
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        is_clipped = ((rho < 1 - clip_eps) & (advantages < 0)) | ((rho > 1 + high) & (advantages > 0))
        metrics = {
            f"loss/{name}": float(per_seq.mean()),
            "loss/pg": float(((pg * mask).sum(dim=1) / lengths).mean()),
            "train/clip_ratio": float((is_clipped.to(mask.dtype) * mask).sum() / n),
        }
        if kl is not None:
            metrics["train/kl"] = float((kl * mask).sum() / n)
    return loss, metrics


GRPO = register_algorithm(
    Algorithm(
        name="grpo",
        summary="group-normalised advantages (r - mean) / (std + 1e-4), token ratios clipped",
        loss=grpo_loss,
        advantages=grpo_advantages,
        normalization="sequence",
    )
)
