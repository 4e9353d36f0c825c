"""Supervised fine-tuning on agent trajectories (the SFT recipe).

Reads SFT JSONL, renders it with the chat template (agent steps as turns), masks everything the
model did not produce, optionally weights each step's tokens by its process reward, and trains
with a token-normalised cross-entropy whose LM head is applied only at label positions, chunk by
chunk. One optimizer step = ``gradient_accumulation_steps`` micro-batches of ``batch_size``
examples on every process; the loss is divided by the trainable-token count of that whole step,
so any split of the same global batch (accumulation, processes) gives the same gradient. Rows of a
micro-batch that open with the same system turn and tool schemas compute them once
(``share_prefix``, ``agenttrainer.models.shared_prefix``), with the same loss and gradients.

Every record (train, eval, replay buffer) is read and checked before the model is loaded, so
bad data fails in seconds; the conversations are tokenised once the tokenizer exists. Training
stops with :class:`~agenttrainer.trainers.guards.NonFiniteLossError` naming the step rather than
take an optimizer step on a NaN/Infinity loss.

Simplifications: the data set is tokenised up front in memory; ``max_optimizer_steps``/``save_steps``
count optimizer steps.

Run: ``knowlyr-trainer sft --train-file sft.jsonl --model smollm2-135m`` or, on 2 processes,
``accelerate launch --num_processes 2 -m agenttrainer.cli sft ...``.
"""

from __future__ import annotations

import contextlib
import math
import random
from pathlib import Path
from typing import Any

import torch

from agenttrainer.config import SFTConfig
from agenttrainer.data import (
    Conversation,
    DataError,
    Example,
    ReplayBuffer,
    chunk_conversation,
    coreset_indices,
    curriculum_indices,
    length_grouped_batches,
    read_located_records,
    sft_conversation,
    shuffled_batches,
    task_weighted_indices,
    tokenize_conversation,
)
from agenttrainer.losses import sft_loss
from agenttrainer.losses.sft import gathered_sft_loss
from agenttrainer.models.prompt_contract import attach_contract, contract_of_chats
from agenttrainer.models.shared_prefix import RowLogps, collate_rows, label_states, token_logps
from agenttrainer.packed import to_device
from agenttrainer.trainers.loop import start_run
from agenttrainer.trainers.plan import epoch_windows, global_batches, shard
from agenttrainer.trainers.setup import Recipe


class SFTTrainer(Recipe):
    """``SFTTrainer(config).train()``; pass ``model``/``tokenizer`` to train an already loaded model."""

    config: SFTConfig

    # ----------------------------------------------------------------------------- data
    def read_conversations(self, path: str | Path) -> tuple[list[Conversation], list[dict[str, Any]]]:
        """Every record of ``path`` as a checked conversation (no model needed), plus the raw
        records when the replay buffer needs them (``use_online_continual``; else ``[]``)."""
        c = self.config
        convs, records = [], []
        for where, record in read_located_records(path):
            convs.append(
                sft_conversation(record, where, agent_format=c.agent_format, mask_observations=c.mask_observations)
            )
            if c.selection.use_online_continual:
                records.append(record)
        if not convs:
            raise DataError(f"{path}: no training records")
        return convs, records

    def tokenize(self, convs: list[Conversation], *, chunk: bool = True) -> list[Example]:
        """Tokenised examples, long trajectories chunked (``chunk_long_trajectories``) or truncated."""
        c = self.config
        examples = []
        for conv in convs:
            if chunk and c.chunk_long_trajectories and conv.num_steps > 1:
                examples += chunk_conversation(self.tokenizer, conv, c.max_length)
            else:
                examples.append(tokenize_conversation(self.tokenizer, conv, max_length=c.max_length))
        return examples

    def load_examples(self, path: str | Path) -> tuple[list[Example], list[dict[str, Any]]]:
        """Tokenised examples of ``path`` and its raw records (see :meth:`read_conversations`)."""
        convs, records = self.read_conversations(path)
        return self.tokenize(convs), records

    def read_data(self) -> dict[str, Any]:
        """Train, replay and eval conversations, all read and checked (see :meth:`train`)."""
        c = self.config
        train, records = self.read_conversations(c.train_file)
        replay, buffer = [], None
        if c.selection.use_online_continual:
            path = c.selection.continual_buffer_path or str(Path(c.output_dir) / "replay_buffer.jsonl")
            buffer = ReplayBuffer.load(path, c.selection.continual_buffer_size, seed=c.seed)
            for i, record in enumerate(buffer.sample(int(len(records) * c.selection.continual_replay_ratio))):
                where = f"{path}:replay[{i}]"
                replay.append(
                    sft_conversation(record, where, agent_format=c.agent_format, mask_observations=c.mask_observations)
                )
            buffer.add(records)
        evals = self.read_conversations(c.eval_file)[0] if c.eval_file else None
        return {"train": train, "replay": replay, "buffer": buffer, "eval": evals}

    @torch.no_grad()
    def example_losses(self, examples: list[Example]) -> list[float]:
        """Per-example mean token loss under the current model (coreset difficulty proxy)."""
        self.wrapped.eval()
        device, out = self.accelerator.device, []
        for start in range(0, len(examples), self.config.batch_size):
            chunk = examples[start : start + self.config.batch_size]
            with self.accelerator.autocast():
                rows = self.token_logps(chunk, packing=True)
            sums = -rows.sums()  # (S,)
            out += (sums / torch.tensor([ex.num_trainable for ex in chunk], device=device)).tolist()
        return out

    def _epoch_plan(self, examples: list[Example]) -> list[list[list[int]]]:
        """Per epoch, the optimizer steps, each a list of global micro-batches (example indices)."""
        c, acc = self.config, self.accelerator
        global_bs = c.batch_size * acc.num_processes
        plan = []
        for epoch in range(c.num_epochs):
            rng = random.Random(c.seed * 1000 + epoch)
            if c.selection.curriculum:
                pool = curriculum_indices(
                    examples, epoch, c.selection.curriculum_start_ratio, c.selection.curriculum_warmup_epochs
                )
            elif c.selection.task_weights:
                pool = task_weighted_indices(examples, c.selection.task_weights, rng)
            else:
                pool = list(range(len(examples)))
            if c.packing:
                local = shuffled_batches(len(pool), global_bs, rng)
            else:
                local = length_grouped_batches([len(examples[i]) for i in pool], global_bs, rng)
            batches = global_batches([[pool[i] for i in b] for b in local], acc)
            plan.append(epoch_windows(batches, c.gradient_accumulation_steps))
        return plan

    # ----------------------------------------------------------------------------- eval
    @torch.no_grad()
    def evaluate(self, examples: list[Example]) -> dict[str, float]:
        """Token-mean cross-entropy and perplexity over ``examples`` (shared across processes)."""
        acc, c = self.accelerator, self.config
        self.wrapped.eval()
        mine = examples[acc.process_index :: acc.num_processes]
        total = torch.zeros(2, device=acc.device)  # (nll sum, tokens)
        for start in range(0, len(mine), c.batch_size):
            with acc.autocast():
                rows = self.token_logps(mine[start : start + c.batch_size], packing=c.packing)
            total += torch.stack([-rows.logps.sum(), torch.tensor(float(rows.logps.numel()), device=acc.device)])
        total = acc.reduce(total, reduction="sum")
        loss = float(total[0] / total[1].clamp(min=1))
        return {"eval/loss": loss, "eval/perplexity": math.exp(min(loss, 50.0))}

    def token_logps(self, examples: list[Example], *, packing: bool) -> RowLogps:
        """The current model's log-prob of every trained token of ``examples`` (no optimizer step)."""
        c = self.config
        return token_logps(
            self.wrapped,
            examples,
            self.wrapped.lm_head(),
            share_prefix=c.share_prefix,
            device=self.accelerator.device,
            chunk_size=c.loss_chunk_size,
            packing=packing,
            pad_token_id=self._pad_id(),
        )

    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return pad if pad is not None else self.tokenizer.eos_token_id

    # ----------------------------------------------------------------------------- train
    def backward_window(self, model: Any, window: list[list[int]], examples: list[Example]) -> tuple[torch.Tensor, int]:
        """Forward + backward over one optimizer step's micro-batches; returns (summed loss, tokens seen).

        The loss is normalised by the trainable tokens of the whole step on all processes (DDP then
        averages the gradients), so batch 1 x accumulation 4 equals batch 4 x accumulation 1.
        """
        c, acc = self.config, self.accelerator
        num_items = sum(examples[i].num_trainable for b in window for i in b) / acc.num_processes
        step_loss, tokens = torch.zeros((), device=acc.device), 0
        for k, batch_idx in enumerate(window):
            batch_examples = [examples[i] for i in shard(batch_idx, acc)]
            # rows opening with the same system turn and tools share it (share_prefix), else packed or padded
            batch, tree = collate_rows(
                batch_examples,
                share_prefix=c.share_prefix,
                module=model,
                packing=c.packing,
                pad_token_id=self._pad_id(),
            )
            batch = to_device(batch, acc.device)
            sync = contextlib.nullcontext() if k == len(window) - 1 else acc.no_sync(model)
            with sync:
                with acc.autocast():
                    # (B, T, H); (1, N, H) for a packed or prefix-tree row
                    hidden = model(batch["input_ids"], batch["position_ids"], batch["seq_ids"], prefix_tree=tree)
                    weight, bias = self.wrapped.lm_head()
                    if tree is None:
                        loss, _ = sft_loss(
                            hidden,
                            weight,
                            batch["labels"],
                            lm_head_bias=bias,
                            token_weights=batch["weights"] if c.step_weighted_loss else None,
                            num_items=num_items,
                            chunk_size=c.loss_chunk_size,
                        )
                    else:  # each label's state wherever the tree computed it; a shared one once, weights summed
                        states, targets, weights = label_states(hidden, batch, c.step_weighted_loss)
                        loss, _ = gathered_sft_loss(
                            states,
                            targets,
                            weight,
                            lm_head_bias=bias,
                            token_weights=weights,
                            num_items=num_items,
                            chunk_size=c.loss_chunk_size,
                        )
                acc.backward(loss)
            step_loss += loss.detach()
            tokens += sum(len(ex) for ex in batch_examples)
        return step_loss, tokens

    def train(self) -> dict[str, Any]:
        c, acc = self.config, self.accelerator
        if not c.train_file:
            raise ValueError("SFTConfig.train_file is required")
        data, self.data = self.data or self.read_data(), None  # tokenised below; the text is not kept
        # The checkpoints say how they were prompted: the training chats' system prompt and tools
        # (when the chats agree; else the contract the starting model carried stays).
        contract = contract_of_chats([(conv.messages, conv.tools) for conv in data["train"]])
        if contract is not None:
            attach_contract(self.model, contract)
        examples = self.tokenize(data["train"]) + self.tokenize(data["replay"], chunk=False)
        buffer = data["buffer"]
        if c.selection.use_coreset_selection:
            hints = [ex.meta.get("loss") for ex in examples]
            losses = hints if all(h is not None for h in hints) else None
            if losses is None and c.selection.coreset_strategy in ("loss_topk", "hybrid"):
                losses = self.example_losses(examples)
            keep = coreset_indices(
                examples, losses, c.selection.coreset_strategy, c.selection.coreset_target_size, random.Random(c.seed)
            )
            examples = [examples[i] for i in keep]
        eval_examples = self.tokenize(data["eval"]) if data["eval"] is not None else None
        del data

        plan = self._epoch_plan(examples)
        run = start_run(self.wrapped, c, acc, plan, desc="sft")
        model, state = run.model, run.state
        last_loss, eval_metrics = float("nan"), {}
        for epoch, window, step, last_of_epoch in run.steps(plan):
            model.train()
            step_loss, tokens = self.backward_window(model, window, examples)
            state["tokens"] += tokens
            last_loss, grad_norm = run.optimizer_step(step_loss)
            run.log_step(last_loss, grad_norm, epoch, {"train/tokens": state["tokens"]})
            if eval_examples and run.eval_due(step, last_of_epoch):
                eval_metrics, run.stop = run.evaluate_and_track(
                    step, lambda: self.evaluate(eval_examples), lambda: self.save_model(Path(c.output_dir) / "best")
                )
            if c.save_steps and step % c.save_steps == 0:
                run.checkpoint(epoch, self.model, self.tokenizer)
        tokens_per_second = run.finish()
        final_dir = Path(c.output_dir) / "final"
        self.save_model(final_dir)
        if buffer is not None and acc.is_main_process:
            buffer.save(c.selection.continual_buffer_path or Path(c.output_dir) / "replay_buffer.jsonl")
        return {
            "output_dir": str(final_dir),
            "global_step": state["global_step"],
            "train_loss": last_loss,
            "eval_loss": eval_metrics.get("eval/loss"),
            "best_eval_loss": state["best_eval_loss"],
            "best_model": str(Path(c.output_dir) / "best") if state["best_eval_loss"] is not None else None,
            "num_examples": len(examples),
            "tokens_per_second": tokens_per_second,
            "early_stopped": state["bad_evals"] >= c.early_stopping_patience > 0,
        }

    def save_model(self, path: str | Path) -> Path:
        """Write the (LoRA-merged) model and tokenizer to ``path`` from the main process."""
        from agenttrainer.models import save_model

        if self.accelerator.is_main_process:
            save_model(self.model, self.tokenizer, path)
        self.accelerator.wait_for_everyone()
        return Path(path)
