"""Offline GRPO over groups of scored trajectories (the GRPO recipe).

Each record of the GRPO JSONL is one task with ``G`` trajectories and their rewards (from
``knowlyr-hub export --format grpo``). The ``algorithm`` (``agenttrainer.algorithms``: ``grpo``
by default, or any other that compares the trajectories of a group: ``dr_grpo``, ``rloo``,
``gspo``, ...) turns the group's rewards into advantages; with ``step_level_advantage`` each
step's tokens get ``A_i * r_step_j / mean(r_steps)``. The loss is the algorithm's clipped
surrogate plus ``kl_coef`` times the k3 KL to the reference (the initial policy, scored once in
a cached pre-pass), its token losses added up as ``loss_normalization`` (default: the
algorithm's) says, the constant budget being ``max_length``. ``grpo_iterations > 1`` takes
several optimizer steps on the same groups; the log-probs before the first of them are the
"old" policy of the ratio. A group's trajectories share their prompt, which the policy and the
reference pass compute once per micro-batch (``share_prefix``, ``agenttrainer.models.shared_prefix``).

Every group is read and checked (rewards finite, group sizes, advantages) before the model is
loaded; a NaN/Infinity loss stops training before its optimizer step (``NonFiniteLossError``).

Simplification: no generation — rollouts come from the environment stack (``knowlyr-hub
collect``), which is what makes this offline.

Run: ``knowlyr-trainer grpo --train-file grpo.jsonl --model ./output/sft/final``.
"""

from __future__ import annotations

import contextlib
import math
import random
from pathlib import Path
from typing import Any

import torch

from agenttrainer.algorithms import Algorithm, get_algorithm
from agenttrainer.algorithms.registry import loss_options
from agenttrainer.config import GRPOConfig
from agenttrainer.data import (
    Conversation,
    DataError,
    Example,
    grpo_group,
    read_located_records,
    shuffled_batches,
    tokenize_conversation,
)
from agenttrainer.models.attention import HiddenStates
from agenttrainer.models.shared_prefix import RowLogps, token_logps
from agenttrainer.trainers.loop import start_run
from agenttrainer.trainers.plan import epoch_windows, global_batches, shard
from agenttrainer.trainers.reference import cached_reference_logps
from agenttrainer.trainers.setup import Recipe


class GRPOTrainer(Recipe):
    """``GRPOTrainer(config).train()``; pass ``model``/``tokenizer`` to train an already loaded model."""

    config: GRPOConfig

    @property
    def algorithm(self) -> Algorithm:
        return get_algorithm(self.config.algorithm)

    def read_data(self) -> list[tuple[list[Conversation], list[float]]]:
        return self.read_groups(self.config.train_file)

    def read_groups(self, path: str | Path) -> list[tuple[list[Conversation], list[float]]]:
        """Every group of ``path``, checked, with its group-normalised advantages; no model needed."""
        c = self.config
        groups = []
        for where, record in read_located_records(path):
            convs = grpo_group(record, where)
            if c.group_size is not None and len(convs) != c.group_size:
                raise DataError(f"{where}: field 'trajectories' has {len(convs)} entries, group_size is {c.group_size}")
            if len(convs) < 2:
                raise DataError(f"{where}: field 'trajectories' needs at least 2 trajectories to compare")
            try:
                adv = self.algorithm.advantages([cv.reward for cv in convs], [None] * len(convs), [True] * len(convs))
            except OverflowError:  # finite rewards can still overflow the std
                adv = [math.inf]
            if not all(math.isfinite(a) for a in adv):
                raise DataError(f"{where}: trajectories[*].reward: rewards too large to normalise")
            groups.append((convs, adv))
        if not groups:
            raise DataError(f"{path}: no groups")
        return groups

    def tokenize(self, read: list[tuple[list[Conversation], list[float]]]) -> list[list[Example]]:
        """Tokenised trajectories per task; ``meta['advantage']`` holds the algorithm's advantage."""
        c = self.config
        groups = []
        for convs, adv in read:
            group = []
            for conv, a in zip(convs, adv):
                ex = tokenize_conversation(self.tokenizer, conv, max_length=c.max_length)
                ex.meta["advantage"] = a
                if not (c.step_level_advantage and conv.step_rewards):
                    ex.weights = [1.0 if lab != -100 else 0.0 for lab in ex.labels]
                group.append(ex)
            groups.append(group)
        return groups

    def load_groups(self, path: str | Path) -> list[list[Example]]:
        return self.tokenize(self.read_groups(path))

    def token_logps(self, module: Any, examples: list[Example]) -> tuple[torch.Tensor, torch.Tensor, RowLogps]:
        """Per-token completion log-probs ``(S, L)``, their mask and all of them with their rows and
        weights; a group's shared prompt is computed once (``share_prefix``)."""
        c = self.config
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
        return rows.per_row(), rows.row_mask(), rows

    @torch.no_grad()
    def reference_logps(self, groups: list[list[Example]], name: str) -> list[torch.Tensor]:
        """Per trajectory, the reference log-prob of each completion token; cached on disk."""
        c = self.config
        flat = [ex for g in groups for ex in g]

        def compute(ref: Any) -> list[torch.Tensor]:
            out: list[torch.Tensor] = []
            for start in range(0, len(flat), c.batch_size * 4):
                chunk = flat[start : start + c.batch_size * 4]
                logps, mask, _ = self.token_logps(ref, chunk)  # (S, L)
                out += [logps[i, : int(mask[i].sum())].float().cpu() for i in range(len(chunk))]
            return out

        ids = [ex.input_ids for ex in flat]
        return cached_reference_logps(c, self.accelerator, self.wrapped, f"ref_token_logps-{name}", ids, compute)

    def _loss(self, model, examples, ref, old, num_items):
        """The algorithm's loss of one micro-batch; returns ``(loss, metrics, detached logps)``."""
        logps, mask, rows = self.token_logps(model, examples)  # (S, L)
        weights = rows.per_row(rows.weights)  # (S, L)
        adv = torch.tensor([ex.meta["advantage"] for ex in examples], device=logps.device)[:, None] * weights  # (S, L)
        ref_t = None
        if ref is not None:
            ref_t = torch.nn.utils.rnn.pad_sequence([r.to(logps.device) for r in ref], batch_first=True)  # (S, L)
        old_t = logps.detach() if old is None else old
        options = loss_options(self.config, self.algorithm, max_tokens=self.config.max_length)
        loss, metrics = self.algorithm.loss(logps, old_t, ref_t, adv, mask, num_items=num_items, **options)
        return loss, metrics, logps.detach()

    def train(self) -> dict[str, Any]:
        c, acc = self.config, self.accelerator
        if not c.train_file:
            raise ValueError("GRPOConfig.train_file is required")
        read, self.data = self.data or self.read_data(), None  # tokenised here; the text is not kept
        groups = self.tokenize(read)
        del read
        flat_index, offset = [], 0  # trajectory indices of each group, into the flat ref list
        for g in groups:
            flat_index.append(list(range(offset, offset + len(g))))
            offset += len(g)
        ref = self.reference_logps(groups, "train") if c.kl_coef else None

        plan = []
        for epoch in range(c.num_epochs):
            batches = shuffled_batches(
                len(groups), c.batch_size * acc.num_processes, random.Random(c.seed * 1000 + epoch)
            )
            plan.append(epoch_windows(global_batches(batches, acc), c.gradient_accumulation_steps))
        state = {"global_step": 0, "windows_done": 0, "tokens": 0}
        run = start_run(self.wrapped, c, acc, plan, "grpo", state, updates_per_window=c.grpo_iterations)
        model, state, total_steps = run.model, run.state, run.total_steps
        window_no, done, last_loss = 0, False, float("nan")
        for epoch, windows in enumerate(plan):
            for window in windows:
                window_no += 1
                if window_no <= state["windows_done"]:
                    continue  # resuming: these groups were already trained on
                # Trajectories (or, normalised per token, completion tokens) in the whole step on all
                # processes, per process (DDP averages grads).
                per_token = loss_options(c, self.algorithm, max_tokens=c.max_length)["normalization"] == "token"
                count = _completion_tokens if per_token else len
                num_items = sum(count(groups[g]) for b in window for g in b) / acc.num_processes
                micro = [shard(b, acc) for b in window]
                old_logps: list[torch.Tensor | None] = [None] * len(micro)
                steps_before = state["global_step"]
                for _ in range(c.grpo_iterations):
                    model.train()
                    step_loss, sums, n_seq = torch.zeros((), device=acc.device), {}, 0
                    for k, mine in enumerate(micro):
                        examples = [ex for g in mine for ex in groups[g]]
                        refs = None if ref is None else [ref[t] for g in mine for t in flat_index[g]]
                        sync = contextlib.nullcontext() if k == len(micro) - 1 else acc.no_sync(model)
                        with sync:
                            loss, metrics, logps = self._loss(model, examples, refs, old_logps[k], num_items)
                            acc.backward(loss)
                        if old_logps[k] is None:
                            old_logps[k] = logps
                        step_loss += loss.detach()
                        for key, v in metrics.items():
                            sums[key] = sums.get(key, 0.0) + v * len(examples)
                        n_seq += len(examples)
                        state["tokens"] += sum(len(ex) for ex in examples)
                    last_loss, grad_norm = run.optimizer_step(step_loss)
                    rewards = [ex.meta["reward"] for m in micro for g in m for ex in groups[g]]
                    # the per-sequence loss mean (loss/grpo, ...): the logged loss says it for the step
                    extra = {k: v / n_seq for k, v in sums.items() if k == "loss/pg" or not k.startswith("loss/")}
                    run.log_step(
                        last_loss, grad_norm, epoch, {**extra, "rollout/reward_mean": sum(rewards) / len(rewards)}
                    )
                    if state["global_step"] >= total_steps:
                        done = True
                        break
                state["windows_done"] = window_no
                # save_steps counts optimizer steps, as in SFT and DPO. Resuming replays whole batches of
                # groups, so the checkpoint is written after the batch whose updates reach a multiple of
                # save_steps (with grpo_iterations == 1 that is exactly every save_steps steps).
                if c.save_steps and state["global_step"] // c.save_steps > steps_before // c.save_steps:
                    run.checkpoint(epoch, self.model, self.tokenizer)
                if done:
                    break
            if done:
                break
        tokens_per_second = run.finish()
        final_dir = self.save_model(Path(c.output_dir) / "final")
        return {
            "output_dir": str(final_dir),
            "global_step": state["global_step"],
            "train_loss": last_loss,
            "num_groups": len(groups),
            "tokens_per_second": tokens_per_second,
        }

    def save_model(self, path: str | Path) -> Path:
        from agenttrainer.models import save_model

        if self.accelerator.is_main_process:
            save_model(self.model, self.tokenizer, path)
        self.accelerator.wait_for_everyone()
        return Path(path)


def _completion_tokens(group: list[Example]) -> int:
    """Tokens the loss scores in a group: every label after the first that is not ignored."""
    return sum(1 for ex in group for label in ex.labels[1:] if label != -100)
