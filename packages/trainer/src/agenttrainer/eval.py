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
    read_jsonl,
    sft_conversation,
    tokenize_conversation,
)
from agenttrainer.trainers.common import HiddenStates, sequence_sums


@torch.no_grad()
def _score(module: HiddenStates, examples: list, bf16: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per example: summed label log-prob, label count, correct argmax predictions."""
    batch = collate(examples, packing=True, pad_token_id=0)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with autocast:
        hidden = module(batch["input_ids"], batch["position_ids"], batch["seq_ids"])  # (1, N, H)
    weight, bias = module.lm_head()
    labels = batch["labels"][:, 1:]
    mask = labels != -100
    h, y = hidden[:, :-1][mask].float(), labels[mask]  # (n, H), (n,)
    logits = h @ weight.float().t() + (0 if bias is None else bias.float())  # label positions only
    logp = torch.log_softmax(logits, dim=-1).gather(-1, y[:, None]).squeeze(-1)
    flat = torch.zeros(mask.shape)
    n = len(examples)
    sums = sequence_sums(flat.masked_scatter(mask, logp), mask, batch["seq_ids"], n)
    counts = sequence_sums(mask.float(), mask, batch["seq_ids"], n)
    correct = sequence_sums(flat.masked_scatter(mask, (logits.argmax(-1) == y).float()), mask, batch["seq_ids"], n)
    return sums, counts, correct


@dataclass
class EvalData:
    """A read and checked eval file: ``kind`` is ``"sft"`` (``items``: conversations), ``"dpo"``
    (``(chosen, rejected)`` pairs) or ``"grpo"`` (groups of conversations)."""

    kind: str
    items: list[Any]


def read_eval_data(eval_file: str | Path, *, agent_format: bool = True, mask_observations: bool = True) -> EvalData:
    """Every record of ``eval_file``, checked; the format is detected from the first record."""
    kind, items = None, []
    for where, record in read_jsonl(eval_file):
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
) -> dict[str, float]:
    """Metrics (``eval/…``) of ``model`` on ``eval_file`` (a path, or :func:`read_eval_data`'s result,
    which then already fixed ``agent_format``/``mask_observations``)."""
    data = eval_file
    if not isinstance(data, EvalData):
        data = read_eval_data(eval_file, agent_format=agent_format, mask_observations=mask_observations)
    module = HiddenStates(model).eval()
    if data.kind == "dpo":
        pairs = data.items
        margins = []
        for i in range(0, len(pairs), batch_size):
            part = pairs[i : i + batch_size]
            exs = [tokenize_conversation(tokenizer, c, max_length=max_length) for p in part for c in p]
            sums = _score(module, exs, bf16)[0].view(-1, 2)
            margins += (sums[:, 0] - sums[:, 1]).tolist()
        return {
            "eval/preference_accuracy": sum(m > 0 for m in margins) / len(margins),
            "eval/logp_margin": sum(margins) / len(margins),
            "eval/num_pairs": float(len(margins)),
        }
    if data.kind == "grpo":
        agree, mean_logps = 0, []
        for group in data.items:
            sums, counts, _ = _score(
                module, [tokenize_conversation(tokenizer, c, max_length=max_length) for c in group], bf16
            )
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
        sums, counts, correct = _score(module, exs, bf16)
        total += torch.stack([-sums.sum(), counts.sum(), correct.sum()])
    loss = float(total[0] / total[1])
    return {
        "eval/loss": loss,
        "eval/perplexity": math.exp(min(loss, 50.0)),
        "eval/token_accuracy": float(total[2] / total[1]),
        "eval/num_tokens": float(total[1]),
    }
