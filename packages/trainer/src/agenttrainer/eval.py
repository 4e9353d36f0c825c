"""Evaluate a model on a held-out JSONL file, whatever its format.

* SFT records: token-mean loss, perplexity and next-token accuracy on trainable tokens (the
  assistant's thought + action when observations are masked).
* DPO records: preference accuracy — how often the chosen completion has the higher summed
  log-prob — and the mean log-prob margin.
* GRPO records: how often the highest-reward trajectory of a group has the highest mean token
  log-prob (``eval/top1_agreement``), and the mean per-token log-prob.

Run: ``knowlyr-trainer eval --model ./output/sft/final --eval-file eval.jsonl``.
"""

from __future__ import annotations

import contextlib
import math
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


def evaluate_model(
    model: Any,
    tokenizer: Any,
    eval_file: str | Path,
    *,
    batch_size: int = 4,
    max_length: int = 2048,
    bf16: bool = True,
    agent_format: bool = True,
    mask_observations: bool = True,
) -> dict[str, float]:
    """Metrics (``eval/…``) of ``model`` on ``eval_file``; the format is detected from the first record."""
    module = HiddenStates(model).eval()
    records = list(read_jsonl(eval_file))
    if not records:
        raise DataError(f"{eval_file}: no records")
    first = records[0][1]
    if "chosen" in first:
        pairs = [dpo_pair(r, w) for w, r in records]
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
    if "trajectories" in first:
        agree, mean_logps = 0, []
        for where, record in records:
            group = grpo_group(record, where)
            sums, counts, _ = _score(
                module, [tokenize_conversation(tokenizer, c, max_length=max_length) for c in group], bf16
            )
            per_token = sums / counts
            mean_logps += per_token.tolist()
            agree += int(per_token.argmax()) == max(range(len(group)), key=lambda i: group[i].reward)
        return {
            "eval/top1_agreement": agree / len(records),
            "eval/mean_token_logp": sum(mean_logps) / len(mean_logps),
            "eval/num_groups": float(len(records)),
        }
    total = torch.zeros(3)
    convs = [sft_conversation(r, w, agent_format=agent_format, mask_observations=mask_observations) for w, r in records]
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
