"""Packed batches after the forward pass: per-sequence views of label-position values.

Losses and metrics come out as ``(B, T-1)`` tensors over label positions with a boolean ``mask``;
a packed row holds several sequences (``seq_ids``). These helpers sum or unpack them per sequence.
"""

from __future__ import annotations

import torch


def sequence_sums(values: torch.Tensor, mask: torch.Tensor, seq_ids: torch.Tensor, num_seqs: int) -> torch.Tensor:
    """Sum per-token ``values`` ``(B, T-1)`` per sequence (label positions only) -> ``(num_seqs,)``."""
    sid = seq_ids[:, 1:][mask]  # sequence of each label token
    return torch.zeros(num_seqs, dtype=values.dtype, device=values.device).index_add(0, sid, values[mask])


def unpack_tokens(values: torch.Tensor, mask: torch.Tensor, seq_ids: torch.Tensor, num_seqs: int) -> torch.Tensor:
    """Label-position values of a packed batch as a right-padded ``(num_seqs, L_max)`` tensor."""
    sid = seq_ids[:, 1:][mask]  # (N,), non-decreasing within each row
    counts = torch.bincount(sid, minlength=num_seqs)
    starts = torch.cumsum(counts, 0) - counts
    pos = torch.arange(sid.numel(), device=sid.device) - starts[sid]
    out = torch.zeros(num_seqs, int(counts.max()) if sid.numel() else 0, dtype=values.dtype, device=values.device)
    return out.index_put((sid, pos), values[mask])


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """Every tensor of a collated batch on ``device``."""
    return {k: v.to(device) for k, v in batch.items()}
