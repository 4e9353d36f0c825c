"""Direct preference optimisation on prompt / chosen / rejected pairs (the DPO recipe).

The reference model's sequence log-probs do not change during training, so they are computed
once, before the first step, in a no-grad pre-pass over the data set (with the initial policy,
or ``ref_model_name_or_path``) and cached in ``<output_dir>/ref_logps.pt``; each training step
then runs one forward over the policy only. Chosen and rejected completions of a micro-batch are
packed into one row, a pair's prompt computed once for both (``share_prefix``; the reference
pre-pass too); only completion tokens are scored. The loss is summed over pairs and
divided by the number of pairs in the whole optimizer step (all micro-batches, all processes).

Every pair (train and eval) is read and checked before the model is loaded; a NaN/Infinity loss
stops training before its optimizer step (``NonFiniteLossError``).

Run: ``knowlyr-trainer dpo --train-file dpo.jsonl --model ./output/sft/final --beta 0.1``.
"""

from __future__ import annotations

import contextlib
import random
from pathlib import Path
from typing import Any

import torch

from agenttrainer.algorithms.dpo import dpo_loss
from agenttrainer.config import DPOConfig
from agenttrainer.data import (
    Conversation,
    DataError,
    Example,
    dpo_pair,
    read_located_records,
    shuffled_batches,
    tokenize_conversation,
)
from agenttrainer.models.attention import HiddenStates
from agenttrainer.models.shared_prefix import token_logps
from agenttrainer.trainers.loop import start_run
from agenttrainer.trainers.plan import epoch_windows, global_batches, shard
from agenttrainer.trainers.reference import cached_reference_logps
from agenttrainer.trainers.setup import Recipe

Pair = tuple[Example, Example]


class DPOTrainer(Recipe):
    """``DPOTrainer(config).train()``; pass ``model``/``tokenizer`` to train an already loaded model."""

    config: DPOConfig

    @staticmethod
    def read_pairs(path: str | Path) -> list[tuple[Conversation, Conversation]]:
        """Every ``(chosen, rejected)`` pair of ``path``, checked; no model needed."""
        pairs = [dpo_pair(record, where) for where, record in read_located_records(path)]
        if not pairs:
            raise DataError(f"{path}: no preference pairs")
        return pairs

    def read_data(self) -> dict[str, Any]:
        c = self.config
        return {"train": self.read_pairs(c.train_file), "eval": self.read_pairs(c.eval_file) if c.eval_file else None}

    def tokenize(self, pairs: list[tuple[Conversation, Conversation]]) -> list[Pair]:
        n = self.config.max_length
        tokenize = tokenize_conversation
        return [
            (tokenize(self.tokenizer, chosen, max_length=n), tokenize(self.tokenizer, rejected, max_length=n))
            for chosen, rejected in pairs
        ]

    def load_pairs(self, path: str | Path) -> list[Pair]:
        return self.tokenize(self.read_pairs(path))

    def sequence_logps(self, module: Any, pairs: list[Pair]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(chosen, rejected)`` summed completion log-probs ``(P,)`` under ``module`` (a HiddenStates)."""
        c, examples = self.config, [p[0] for p in pairs] + [p[1] for p in pairs]
        with self.accelerator.autocast():
            head = HiddenStates.lm_head(self.accelerator.unwrap_model(module))
            rows = token_logps(
                module,
                examples,
                head,
                share_prefix=c.share_prefix,
                device=self.accelerator.device,
                chunk_size=c.loss_chunk_size,
            )
        sums = rows.sums()  # (2P,)
        return sums[: len(pairs)], sums[len(pairs) :]

    @torch.no_grad()
    def reference_logps(self, pairs: list[Pair], name: str) -> torch.Tensor:
        """``(P, 2)`` reference log-probs, computed once and cached on disk (keyed by data + model)."""
        c = self.config

        def compute(ref: Any) -> torch.Tensor:
            out = []
            for start in range(0, len(pairs), c.batch_size):
                chosen, rejected = self.sequence_logps(ref, pairs[start : start + c.batch_size])
                out.append(torch.stack([chosen, rejected], dim=1).float().cpu())
            return torch.cat(out)

        ids = [(p[0].input_ids, p[1].input_ids) for p in pairs]
        return cached_reference_logps(c, self.accelerator, self.wrapped, f"ref_logps-{name}", ids, compute)

    def _loss(
        self, model: Any, pairs: list[Pair], ref: torch.Tensor | None, num_items: float
    ) -> tuple[torch.Tensor, dict]:
        c = self.config
        chosen, rejected = self.sequence_logps(model, pairs)
        return dpo_loss(
            chosen,
            rejected,
            None if ref is None else ref[:, 0].to(chosen.device),
            None if ref is None else ref[:, 1].to(chosen.device),
            beta=c.beta,
            loss_type=c.loss_type,
            label_smoothing=c.label_smoothing,
            reference_free=c.reference_free,
            chosen_num_tokens=torch.tensor([float(p[0].num_trainable) for p in pairs], device=chosen.device),
            rejected_num_tokens=torch.tensor([float(p[1].num_trainable) for p in pairs], device=chosen.device),
            num_items=num_items,
        )

    @torch.no_grad()
    def evaluate(self, pairs: list[Pair], ref: torch.Tensor | None) -> dict[str, float]:
        """Mean DPO loss and preference accuracy over ``pairs`` (all processes)."""
        acc, c = self.accelerator, self.config
        self.wrapped.eval()
        idx = list(range(len(pairs)))[acc.process_index :: acc.num_processes]
        total = torch.zeros(3, device=acc.device)  # loss sum, correct, count
        for start in range(0, len(idx), c.batch_size):
            sel = idx[start : start + c.batch_size]
            loss, m = self._loss(self.wrapped, [pairs[i] for i in sel], None if ref is None else ref[sel], 1.0)
            total += torch.tensor([loss.item(), m["rewards/accuracies"] * len(sel), len(sel)], device=acc.device)
        total = acc.reduce(total, reduction="sum")
        return {"eval/loss": float(total[0] / total[2]), "eval/rewards_accuracy": float(total[1] / total[2])}

    def train(self) -> dict[str, Any]:
        c, acc = self.config, self.accelerator
        if not c.train_file:
            raise ValueError("DPOConfig.train_file is required")
        data, self.data = self.data or self.read_data(), None  # tokenised here; the text is not kept
        pairs = self.tokenize(data["train"])
        eval_pairs = self.tokenize(data["eval"]) if data["eval"] else None
        del data
        ref = None if c.reference_free else self.reference_logps(pairs, "train")
        eval_ref = None if c.reference_free or not eval_pairs else self.reference_logps(eval_pairs, "eval")

        plan = []
        for epoch in range(c.num_epochs):
            batches = shuffled_batches(
                len(pairs), c.batch_size * acc.num_processes, random.Random(c.seed * 1000 + epoch)
            )
            plan.append(epoch_windows(global_batches(batches, acc), c.gradient_accumulation_steps))
        run = start_run(self.wrapped, c, acc, plan, desc="dpo")
        model, state = run.model, run.state
        last_loss, eval_metrics = float("nan"), {}
        for epoch, window, step, last_of_epoch in run.steps(plan):
            model.train()
            num_items = sum(len(b) for b in window) / acc.num_processes  # pairs in the step, per process
            step_loss, sums = torch.zeros((), device=acc.device), {}
            for k, batch_idx in enumerate(window):
                mine = shard(batch_idx, acc)
                sync = contextlib.nullcontext() if k == len(window) - 1 else acc.no_sync(model)
                with sync:
                    loss, metrics = self._loss(
                        model, [pairs[i] for i in mine], None if ref is None else ref[mine], num_items
                    )
                    acc.backward(loss)
                step_loss += loss.detach()
                for key, v in metrics.items():
                    sums[key] = sums.get(key, 0.0) + v * len(mine)
                state["tokens"] += sum(len(pairs[i][0]) + len(pairs[i][1]) for i in mine)
            last_loss, grad_norm = run.optimizer_step(step_loss)
            n = sum(len(shard(b, acc)) for b in window)
            run.log_step(last_loss, grad_norm, epoch, {k: v / n for k, v in sums.items() if not k.startswith("loss/")})
            if eval_pairs and run.eval_due(step, last_of_epoch):
                eval_metrics, run.stop = run.evaluate_and_track(
                    step,
                    lambda: self.evaluate(eval_pairs, eval_ref),
                    lambda: self.save_model(Path(c.output_dir) / "best"),
                )
            if c.save_steps and step % c.save_steps == 0:
                run.checkpoint(epoch, self.model, self.tokenizer)
        tokens_per_second = run.finish()
        final_dir = self.save_model(Path(c.output_dir) / "final")
        return {
            "output_dir": str(final_dir),
            "global_step": state["global_step"],
            "train_loss": last_loss,
            "eval_loss": eval_metrics.get("eval/loss"),
            "eval_rewards_accuracy": eval_metrics.get("eval/rewards_accuracy"),
            "best_eval_loss": state["best_eval_loss"],
            "num_pairs": len(pairs),
            "tokens_per_second": tokens_per_second,
        }

    def save_model(self, path: str | Path) -> Path:
        from agenttrainer.models import save_model

        if self.accelerator.is_main_process:
            save_model(self.model, self.tokenizer, path)
        self.accelerator.wait_for_everyone()
        return Path(path)
