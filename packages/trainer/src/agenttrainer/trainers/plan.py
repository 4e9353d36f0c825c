"""Batch planning: an epoch's global micro-batches grouped into optimizer steps and split across processes."""

from __future__ import annotations

from typing import Any


def epoch_windows(batches: list[list[int]], accumulation: int) -> list[list[list[int]]]:
    """Group an epoch's global micro-batches into optimizer steps of ``accumulation`` micro-batches."""
    return [batches[i : i + accumulation] for i in range(0, len(batches), accumulation)]


def shard(batch: list[int], accelerator: Any) -> list[int]:
    """This process's share of a global micro-batch (strided, so a short last batch still splits).

    Losses are normalised by counts of the whole global batch, so how it is split does not change
    the gradient.
    """
    return batch[accelerator.process_index :: accelerator.num_processes]


def global_batches(batches: list[list[int]], accelerator: Any) -> list[list[int]]:
    """Drop a trailing global batch too small to give every process an example."""
    return [b for b in batches if len(b) >= accelerator.num_processes]
