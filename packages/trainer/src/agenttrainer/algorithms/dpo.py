"""DPO and its variants: preference losses over sequence log-probabilities (the DPO recipe's).

``delta = (log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l))`` (``ref`` terms are 0 when
``reference_free``), then per pair:

* ``sigmoid`` (DPO, with conservative label smoothing eps):
  ``-(1 - eps) * log sigmoid(beta * delta) - eps * log sigmoid(-beta * delta)``
* ``hinge`` (SLiC): ``max(0, 1 - beta * delta)``
* ``ipo``: ``(delta' - 1 / (2 * beta))**2`` where ``delta'`` uses log-ratios averaged per
  completion token when token counts are given (the length normalisation TRL confirmed with the
  IPO authors), sequence sums otherwise.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

LOSS_TYPES = ("sigmoid", "hinge", "ipo")


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor | None,
    ref_rejected_logps: torch.Tensor | None,
    *,
    beta: float = 0.1,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
    reference_free: bool = False,
    chosen_num_tokens: torch.Tensor | None = None,
    rejected_num_tokens: torch.Tensor | None = None,
    num_items: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPO loss summed over pairs and divided by ``num_items`` (default: the number of pairs).

    All log-prob arguments are ``(P,)`` sums over completion tokens.

    Hand-derived check (used by the unit test): policy ``(-1, -3)``, reference ``(-2, -2)``,
    ``beta = 0.5``: ``delta = (-1 + 2) - (-3 + 2) = 2``, ``beta * delta = 1``;
    sigmoid loss ``= -log sigmoid(1) = log(1 + e^-1) = 0.31326``; with ``eps = 0.1`` it is
    ``0.9 * 0.31326 + 0.1 * 1.31326 = 0.41326`` (since ``-log sigmoid(-1) = 1.31326``);
    hinge ``= max(0, 1 - 1) = 0``; IPO without token counts ``= (2 - 1)**2 = 1``.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if label_smoothing and loss_type != "sigmoid":
        raise ValueError(f"label_smoothing applies to loss_type='sigmoid' only, got {loss_type!r}")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing}")
    if reference_free or ref_chosen_logps is None or ref_rejected_logps is None:
        if not reference_free:
            raise ValueError("reference log-probs are required unless reference_free=True")
        ref_chosen_logps = torch.zeros_like(policy_chosen_logps)
        ref_rejected_logps = torch.zeros_like(policy_rejected_logps)
    chosen_ratio = policy_chosen_logps - ref_chosen_logps  # (P,)
    rejected_ratio = policy_rejected_logps - ref_rejected_logps  # (P,)
    delta = chosen_ratio - rejected_ratio  # (P,)

    if loss_type == "sigmoid":
        losses = -(1 - label_smoothing) * F.logsigmoid(beta * delta) - label_smoothing * F.logsigmoid(-beta * delta)
    elif loss_type == "hinge":
        losses = torch.relu(1 - beta * delta)
    else:  # ipo
        if chosen_num_tokens is not None and rejected_num_tokens is not None:
            delta = chosen_ratio / chosen_num_tokens.clamp(min=1) - rejected_ratio / rejected_num_tokens.clamp(min=1)
        losses = (delta - 1 / (2 * beta)) ** 2

    if num_items is None:
        num_items = losses.numel()
    loss = losses.sum() / num_items
    chosen_rewards = (beta * chosen_ratio).detach()
    rejected_rewards = (beta * rejected_ratio).detach()
    metrics = {
        f"loss/dpo_{loss_type}": float(losses.detach().mean()),
        "rewards/chosen": float(chosen_rewards.mean()),
        "rewards/rejected": float(rejected_rewards.mean()),
        "rewards/margins": float((chosen_rewards - rejected_rewards).mean()),
        "rewards/accuracies": float((chosen_rewards > rejected_rewards).float().mean()),
        "logps/chosen": float(policy_chosen_logps.detach().mean()),
        "logps/rejected": float(policy_rejected_logps.detach().mean()),
    }
    return loss, metrics
