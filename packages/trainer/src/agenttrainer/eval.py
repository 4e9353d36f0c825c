"""Evaluate a model on a held-out JSONL file, whatever its format.

* SFT records: token-mean loss, perplexity and next-token accuracy on trainable tokens (the
  assistant's thought + action when observations are masked).
* DPO records: preference accuracy — how often the chosen completion has the higher summed
  log-prob — and the mean log-prob margin.
* GRPO records: how often the highest-reward trajectory of a group has the highest mean token
  log-prob (``eval/top1_agreement``), and the mean per-token log-prob.

Every record is read and checked (:func:`read_eval_data`) before the model is needed, so the
command line fails on bad data before it loads a model.

Run: ``knowlyr-trainer eval --model ./output/sft/final --eval-file eval.jsonl``.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agenttrainer.data import (
    DataError,
    collate,
    dpo_pair,
    grpo_group,
    read_located_records,
    sft_conversation,
    tokenize_conversation,
)
from agenttrainer.losses import chunked_token_logps
from agenttrainer.models.attention import HiddenStates
from agenttrainer.packed import sequence_sums, to_device
from agenttrainer.precision import resolve_bf16


def eval_device(model: Any, device: str | torch.device | None = None) -> torch.device:
    """``device`` if given; else the model's device when it is an accelerator, else CUDA when
    available, else the CPU."""
    if device is not None:
        return torch.device(device)
    current = next(model.parameters()).device
    if current.type != "cpu":
        return current
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _autocast(device: torch.device, bf16: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast on ``device`` when asked for and native there (``precision``), as in training."""
    if device.type in ("cpu", "cuda") and resolve_bf16(bf16, device):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _chunked_hits(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, labels: torch.Tensor, chunk_size: int
) -> torch.Tensor:
    """``(B, T-1)``: 1.0 where the label token is the argmax prediction; logits for one chunk of
    label positions at a time, as in :func:`~agenttrainer.losses.chunked_token_logps`."""
    mask = labels[:, 1:] != -100
    h, y = hidden[:, :-1][mask], labels[:, 1:][mask]  # (n, H), (n,)
    hits = []
    for start in range(0, y.numel(), chunk_size):
        logits = h[start : start + chunk_size] @ weight.t()  # (chunk, V)
        if bias is not None:
            logits = logits + bias
        hits.append((logits.argmax(-1) == y[start : start + chunk_size]).float())
    flat = torch.cat(hits) if hits else hidden.new_zeros(0, dtype=torch.float32)
    return torch.zeros(mask.shape, device=hidden.device).masked_scatter(mask, flat)


@torch.no_grad()
def _score(
    module: HiddenStates, examples: list, device: torch.device, bf16: bool, chunk_size: int, *, hits: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per example: summed label log-prob, label count and (``hits``) correct argmax predictions.

    The LM head runs at label positions only, ``chunk_size`` positions at a time (the trainers'
    path), so no ``(tokens, vocabulary)`` logits exist for the whole batch.
    """
    batch = to_device(collate(examples, packing=True, pad_token_id=0), device)
    n, seq_ids = len(examples), batch["seq_ids"]
    with _autocast(device, bf16):
        hidden = module(batch["input_ids"], batch["position_ids"], seq_ids)  # (1, N, H)
        weight, bias = module.lm_head()
        logps, mask = chunked_token_logps(hidden, weight, batch["labels"], lm_head_bias=bias, chunk_size=chunk_size)
        correct = _chunked_hits(hidden, weight, bias, batch["labels"], chunk_size) if hits else None
    sums = sequence_sums(logps, mask, seq_ids, n)
    counts = sequence_sums(mask.float(), mask, seq_ids, n)
    return sums, counts, None if correct is None else sequence_sums(correct, mask, seq_ids, n)


@dataclass
class EvalData:
    """A read and checked eval file: ``kind`` is ``"sft"`` (``items``: conversations), ``"dpo"``
    (``(chosen, rejected)`` pairs) or ``"grpo"`` (groups of conversations)."""

    kind: str
    items: list[Any]


def read_eval_data(eval_file: str | Path, *, agent_format: bool = True, mask_observations: bool = True) -> EvalData:
    """Every record of ``eval_file``, checked; the format is detected from the first record."""
    kind, items = None, []
    for where, record in read_located_records(eval_file):
        if kind is None:
            kind = "dpo" if "chosen" in record else "grpo" if "trajectories" in record else "sft"
        if kind == "dpo":
            items.append(dpo_pair(record, where))
        elif kind == "grpo":
            items.append(grpo_group(record, where))
        else:
            items.append(
                sft_conversation(record, where, agent_format=agent_format, mask_observations=mask_observations)
            )
    if kind is None:
        raise DataError(f"{eval_file}: no records")
    return EvalData(kind, items)


def evaluate_model(
    model: Any,
    tokenizer: Any,
    eval_file: str | Path | EvalData,
    *,
    batch_size: int = 4,
    max_length: int = 2048,
    bf16: bool = True,
    agent_format: bool = True,
    mask_observations: bool = True,
    device: str | torch.device | None = None,
    chunk_size: int = 1024,
) -> dict[str, float]:
    """Metrics (``eval/…``) of ``model`` on ``eval_file`` (a path, or :func:`read_eval_data`'s result,
    which then already fixed ``agent_format``/``mask_observations``).

    The model is moved to ``device`` (default :func:`eval_device`: its own accelerator, else CUDA
    when available, else the CPU) and every batch with it; ``bf16`` autocasts where the device
    supports it; the LM head runs on ``chunk_size`` label positions at a time.
    """
    data = eval_file
    if not isinstance(data, EvalData):
        data = read_eval_data(eval_file, agent_format=agent_format, mask_observations=mask_observations)
    device = eval_device(model, device)
    module = HiddenStates(model.to(device)).eval()
    if data.kind == "dpo":
        pairs = data.items
        margins = []
        for i in range(0, len(pairs), batch_size):
            part = pairs[i : i + batch_size]
            exs = [tokenize_conversation(tokenizer, c, max_length=max_length) for p in part for c in p]
            sums = _score(module, exs, device, bf16, chunk_size)[0].view(-1, 2)
            margins += (sums[:, 0] - sums[:, 1]).tolist()
        return {
            "eval/preference_accuracy": sum(m > 0 for m in margins) / len(margins),
            "eval/logp_margin": sum(margins) / len(margins),
            "eval/num_pairs": float(len(margins)),
        }
    if data.kind == "grpo":
        agree, mean_logps = 0, []
        for group in data.items:
            exs = [tokenize_conversation(tokenizer, c, max_length=max_length) for c in group]
            sums, counts, _ = _score(module, exs, device, bf16, chunk_size)
            per_token = sums / counts
            mean_logps += per_token.tolist()
            agree += int(per_token.argmax()) == max(range(len(group)), key=lambda i: group[i].reward)
        return {
            "eval/top1_agreement": agree / len(data.items),
            "eval/mean_token_logp": sum(mean_logps) / len(mean_logps),
            "eval/num_groups": float(len(data.items)),
        }
    total = torch.zeros(3)
    convs = data.items
    for i in range(0, len(convs), batch_size):
        exs = [tokenize_conversation(tokenizer, c, max_length=max_length) for c in convs[i : i + batch_size]]
        sums, counts, correct = _score(module, exs, device, bf16, chunk_size, hits=True)
        total += torch.stack([-sums.sum(), counts.sum(), correct.sum()]).cpu()
    loss = float(total[0] / total[1])
    return {
        "eval/loss": loss,
        "eval/perplexity": math.exp(min(loss, 50.0)),
        "eval/token_accuracy": float(total[2] / total[1]),
        "eval/num_tokens": float(total[1]),
    }
