"""The part of a training run every recipe shares: start (optimizer, schedule, ``accelerate``,
resume, logger, bar), the optimizer steps to take, one optimizer step with its guards (online RL
takes it too), logging, evaluation with best-model tracking and early stopping, checkpoints, finish.

SFT, DPO and GRPO call these instead of writing them three times, so their resume, logging and
checkpoint semantics are one (``tests/test_recipe_semantics.py`` checks them together).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agenttrainer.config import TrainConfig
from agenttrainer.trainers.guards import check_finite
from agenttrainer.trainers.setup import make_optimizer_and_scheduler


def optimizer_step(
    acc: Any, params: list[Any], optimizer: Any, scheduler: Any, *, step: int, loss: float, max_grad_norm: float
) -> Any:
    """Optimizer step ``step`` with its guards, the one every recipe and online RL take: refuse a
    non-finite ``loss`` or gradient norm before anything changes, clip to ``max_grad_norm`` (0: no
    clipping), step the optimizer and the schedule, zero the gradients. Returns the gradient norm
    (None without clipping)."""
    check_finite(step, loss)
    grad_norm = acc.clip_grad_norm_(params, max_grad_norm) if max_grad_norm > 0 else None
    check_finite(step, loss, grad_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return grad_norm


@dataclass
class RunStart:
    """What every recipe's loop starts from: the prepared model and optimizer, the resumed
    ``state`` (``global_step`` and the recipe's own counters), the metrics logger and the bar."""

    model: Any
    optimizer: Any
    scheduler: Any
    params: list[Any]
    state: dict[str, Any]
    logger: Any
    bar: Any
    acc: Any
    config: TrainConfig
    total_steps: int
    started: float = field(default_factory=time.perf_counter)
    tokens_at_start: int = 0
    stop: bool = False  # set by early stopping; ``steps`` then ends

    def steps(self, plan: list[list[Any]]) -> Iterator[tuple[int, Any, int, bool]]:
        """``(epoch, window, step, last_of_epoch)`` for each optimizer step still to take: steps a
        resumed run already took are skipped (their data was consumed), and it ends at
        ``total_steps`` or when ``stop`` is set."""
        step = 0
        for epoch, windows in enumerate(plan):
            for i, window in enumerate(windows):
                step += 1
                if step <= self.state["global_step"]:
                    continue
                yield epoch, window, step, i == len(windows) - 1
                if self.stop or step >= self.total_steps:
                    return

    def optimizer_step(self, step_loss: torch.Tensor) -> tuple[float, Any]:
        """Average the step's loss over processes, take the :func:`optimizer_step`, count it.
        Returns the loss and the gradient norm (None without clipping)."""
        step = self.state["global_step"] + 1
        loss = float(self.acc.reduce(step_loss, reduction="mean"))
        grad_norm = optimizer_step(
            self.acc,
            self.params,
            self.optimizer,
            self.scheduler,
            step=step,
            loss=loss,
            max_grad_norm=self.config.max_grad_norm,
        )
        self.state["global_step"] = step
        self.bar.update(1)
        self.bar.set_postfix(loss=f"{loss:.4f}")
        return loss, grad_norm

    def log_step(self, loss: float, grad_norm: Any, epoch: int, extra: dict[str, float]) -> None:
        """Every ``logging_steps`` optimizer steps: loss, learning rate, epoch, ``extra``, grad norm."""
        step = self.state["global_step"]
        if step % self.config.logging_steps:
            return
        log = {"loss/train": loss, "train/learning_rate": self.scheduler.get_last_lr()[0], "train/epoch": epoch + 1}
        log.update(extra)
        if grad_norm is not None:
            log["train/grad_norm"] = float(grad_norm)
        self.logger.log(log, step)

    def finish(self) -> float | None:
        """Close the bar and the logger; the run's training tokens per second."""
        self.bar.close()
        self.logger.close()
        elapsed = time.perf_counter() - self.started
        return (self.state["tokens"] - self.tokens_at_start) / elapsed if elapsed > 0 else None

    def checkpoint(self, epoch: int, lm: Any, tokenizer: Any) -> None:
        """``checkpoint-<global_step>``: everything resume needs, loadable as a model."""
        from agenttrainer.checkpoints import save_checkpoint

        save_checkpoint(
            self.acc,
            self.model,
            self.optimizer,
            self.scheduler,
            self.config,
            {**self.state, "epoch": epoch},
            lm=lm,
            tokenizer=tokenizer,
        )

    def evaluate_and_track(self, step: int, evaluate: Any, save_best: Any) -> tuple[dict[str, float], bool]:
        """Run ``evaluate()``, log it, keep the best model (``save_best()``) by ``eval/loss`` and
        count evaluations without improvement; return the metrics and whether to stop early."""
        metrics = evaluate()
        self.logger.log(metrics, step)
        state = self.state
        if state["best_eval_loss"] is None or metrics["eval/loss"] < state["best_eval_loss"]:
            state["best_eval_loss"], state["bad_evals"] = metrics["eval/loss"], 0
            save_best()
        else:
            state["bad_evals"] += 1
        patience = self.config.early_stopping_patience
        return metrics, bool(patience) and state["bad_evals"] >= patience

    def eval_due(self, step: int, last_window: bool) -> bool:
        """Every ``eval_steps`` optimizer steps, or at the end of each epoch when it is 0."""
        every = self.config.eval_steps
        return bool(every and step % every == 0) or (not every and last_window)


def start_run(
    wrapped: nn.Module,
    config: TrainConfig,
    acc: Any,
    plan: list[list[Any]],
    desc: str,
    state: dict[str, Any] | None = None,
    updates_per_window: int = 1,
) -> RunStart:
    """For a ``plan`` (per epoch, the batch windows; each window takes ``updates_per_window``
    optimizer steps): the step count (capped by ``max_optimizer_steps``), optimizer and schedule over it,
    ``accelerate`` preparation, resume from the configured checkpoint (into ``state``; default: the
    SFT/DPO counters), metrics logger and progress bar: one way for SFT, DPO and GRPO, so their
    resume, logging and checkpoint semantics cannot drift apart."""
    from tqdm.auto import tqdm

    from agenttrainer.checkpoints import load_checkpoint, resolve_checkpoint
    from agenttrainer.logging_backends import MetricsLogger

    state = state or {"global_step": 0, "best_eval_loss": None, "bad_evals": 0, "tokens": 0}
    total_steps = sum(len(windows) for windows in plan) * updates_per_window
    if config.max_optimizer_steps > 0:
        total_steps = min(total_steps, config.max_optimizer_steps)
    optimizer, scheduler = make_optimizer_and_scheduler(wrapped, config, total_steps)
    model, optimizer = acc.prepare(wrapped, optimizer)
    params = [p for p in model.parameters() if p.requires_grad]
    resume = resolve_checkpoint(config)
    if resume is not None:
        state.update(load_checkpoint(resume, acc, model, optimizer, scheduler))
    logger = MetricsLogger(
        config.output_dir,
        config.report_to,
        run_name=config.run_name or Path(config.output_dir).name,
        config=config.to_dict(),
        enabled=acc.is_main_process,
    )
    bar = tqdm(
        total=total_steps,
        initial=state["global_step"],
        desc=desc,
        disable=not (config.progress_bar and acc.is_main_process),
    )
    return RunStart(
        model,
        optimizer,
        scheduler,
        params,
        state,
        logger,
        bar,
        acc,
        config,
        total_steps,
        tokens_at_start=state["tokens"],
    )
