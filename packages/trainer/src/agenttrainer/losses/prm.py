"""The process reward model's loss: calibrated values plus the right order within a task.

A PRM is used two ways: its ``sigmoid(logit)`` is read as the probability that the task still
succeeds (dense rewards, calibration), and its ranking of prefixes of the same task picks the
best of N answers. So the loss has two terms:

* ``bce``: binary cross-entropy of ``sigmoid(logit)`` against the soft label (a Monte-Carlo
  success rate in [0, 1]), summed over records and divided by ``num_records``;
* ``pairwise``: a Bradley-Terry loss over every ordered pair ``(i, j)`` of the same group (task)
  whose labels differ by at least ``margin``: ``-log sigmoid(logit_i - logit_j)``, summed and
  divided by ``num_pairs`` (0 when the batch has no pair).

``loss = bce + pairwise_weight * pairwise``. Labels closer than ``margin`` make no pair: two
Monte-Carlo estimates from a few continuations that differ by 0.1 are noise, not an order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: how far below ``margin`` a label difference may fall from float rounding (0.7 - 0.2 is
#: 0.49999999999999994) and still make a pair
MARGIN_TOLERANCE = 1e-6


def preference_pairs(labels: torch.Tensor, groups: torch.Tensor, margin: float) -> torch.Tensor:
    """``(B, B)`` bool: ``[i, j]`` when records ``i`` and ``j`` share a group and ``label_i -
    label_j >= margin`` (``i`` should score above ``j``)."""
    if not margin > 0:
        raise ValueError(f"margin must be positive (a record is never preferred to itself), got {margin}")
    labels = labels.detach().double()
    same_group = groups[:, None] == groups[None, :]  # (B, B)
    return same_group & (labels[:, None] - labels[None, :] >= margin - MARGIN_TOLERANCE)


def prm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    groups: torch.Tensor,
    *,
    pairwise_weight: float = 1.0,
    margin: float = 0.5,
    num_records: float | None = None,
    num_pairs: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """BCE against soft labels plus ``pairwise_weight`` x the within-group Bradley-Terry loss.

    Args:
        logits: ``(B,)`` the model's outputs.
        labels: ``(B,)`` success probabilities in [0, 1].
        groups: ``(B,)`` integer group ids (one per task); only records of one group are compared.
        pairwise_weight: weight of the pairwise term (0: BCE alone).
        margin: smallest label difference that makes a pair (> 0).
        num_records: what the BCE sum is divided by (default ``B``); a trainer passes the count
            of the whole optimizer step so that accumulated micro-batches add up to its mean.
        num_pairs: what the pairwise sum is divided by (default: this batch's pairs); likewise.

    Returns:
        ``(loss, metrics)``: ``loss/bce`` and ``loss/pairwise`` (each divided as the loss is, so
        a step's micro-batches add up) and ``train/pairs``, this batch's pair count.
    """
    logits = logits.float()
    bce_sum = F.binary_cross_entropy_with_logits(logits, labels.float(), reduction="sum")
    bce = bce_sum / (num_records if num_records is not None else logits.numel())
    pairs = preference_pairs(labels, groups, margin)  # (B, B)
    count = int(pairs.sum())
    differences = logits[:, None] - logits[None, :]  # (B, B): logit_i - logit_j
    pairwise_sum = -F.logsigmoid(differences[pairs]).sum()
    pairwise = pairwise_sum / max(num_pairs if num_pairs is not None else count, 1)
    loss = bce + pairwise_weight * pairwise
    metrics = {"loss/bce": float(bce.detach()), "loss/pairwise": float(pairwise.detach()), "train/pairs": float(count)}
    return loss, metrics
