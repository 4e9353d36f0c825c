"""Turn examples into model inputs without padding (packing) or with little of it.

``pack`` concatenates a batch into one row ``(1, N)``; ``position_ids`` restart at 0 for each
sequence and ``seq_ids`` say which sequence a token belongs to, from which the forward pass
builds a block-diagonal causal mask, so sequences never attend to each other and no compute is
spent on pad tokens. ``pad`` is the classic ``(B, T_max)`` layout, used with
``length_grouped_batches`` so that a batch holds sequences of similar length.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from agenttrainer.data.formatting import Example
from agenttrainer.losses.sft import IGNORE_INDEX


def pack(examples: Sequence[Example]) -> dict[str, torch.Tensor]:
    """One ``(1, N)`` row holding every example back to back (``N`` = total tokens)."""
    ids, labels, weights, pos, seq = [], [], [], [], []
    for k, ex in enumerate(examples):
        ids += ex.input_ids
        # The first token of each sequence must not be predicted from the previous sequence.
        labels += [IGNORE_INDEX, *ex.labels[1:]]
        weights += ex.weights
        pos += range(len(ex))
        seq += [k] * len(ex)
    return {
        "input_ids": torch.tensor([ids]),
        "labels": torch.tensor([labels]),
        "weights": torch.tensor([weights], dtype=torch.float32),
        "position_ids": torch.tensor([pos]),
        "seq_ids": torch.tensor([seq]),
    }


def pad(examples: Sequence[Example], pad_token_id: int) -> dict[str, torch.Tensor]:
    """``(B, T_max)`` tensors, right-padded; ``seq_ids`` is ``b`` on real tokens and -1 on pads."""
    width = max(len(ex) for ex in examples)
    out = {
        "input_ids": torch.full((len(examples), width), pad_token_id),
        "labels": torch.full((len(examples), width), IGNORE_INDEX),
        "weights": torch.zeros(len(examples), width),
        "position_ids": torch.zeros(len(examples), width, dtype=torch.long),
        "seq_ids": torch.full((len(examples), width), -1),
    }
    for b, ex in enumerate(examples):
        n = len(ex)
        out["input_ids"][b, :n] = torch.tensor(ex.input_ids)
        out["labels"][b, :n] = torch.tensor(ex.labels)
        out["weights"][b, :n] = torch.tensor(ex.weights)
        out["position_ids"][b, :n] = torch.arange(n)
        out["seq_ids"][b, :n] = b
    return out


def collate(examples: Sequence[Example], *, packing: bool, pad_token_id: int) -> dict[str, torch.Tensor]:
    return pack(examples) if packing else pad(examples, pad_token_id)


def attention_allowed(seq_ids: torch.Tensor) -> torch.Tensor:
    """Boolean ``(B, T, T)``: causal and block-diagonal over ``seq_ids`` (pads see only themselves)."""
    same = seq_ids[:, :, None] == seq_ids[:, None, :]  # (B, T, T)
    causal = torch.ones(seq_ids.shape[1], seq_ids.shape[1], dtype=torch.bool, device=seq_ids.device).tril()
    allowed = same & causal & (seq_ids[:, :, None] >= 0)
    # A pad row that sees nothing would give NaN softmax; let it see itself (its output is unused).
    return allowed | torch.eye(seq_ids.shape[1], dtype=torch.bool, device=seq_ids.device)


def attention_bias(seq_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive 4D mask ``(B, 1, T, T)`` from :func:`attention_allowed` (0 allowed, dtype min elsewhere)."""
    allowed = attention_allowed(seq_ids)
    bias = torch.zeros(allowed.shape, dtype=dtype, device=seq_ids.device)
    return bias.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]


def length_grouped_batches(
    lengths: Sequence[int], batch_size: int, rng: random.Random, *, group_batches: int = 32
) -> list[list[int]]:
    """Shuffled batches whose members have similar lengths (sorted within windows of ``group_batches``)."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    window = batch_size * group_batches
    batches = []
    for start in range(0, len(order), window):
        block = sorted(order[start : start + window], key=lambda i: lengths[i], reverse=True)
        batches += [block[i : i + batch_size] for i in range(0, len(block), batch_size)]
    rng.shuffle(batches)
    return batches


def shuffled_batches(n: int, batch_size: int, rng: random.Random) -> list[list[int]]:
    order = list(range(n))
    rng.shuffle(order)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]
