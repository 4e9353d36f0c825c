"""What a recipe builds before its loop: the accelerator, the policy (with LoRA), the optimizer and schedule."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agenttrainer.config import TrainConfig


def make_accelerator(config: TrainConfig) -> Any:
    """An ``accelerate.Accelerator`` with bf16 autocast when asked for and supported."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    mixed = "no"
    if config.bf16:
        cuda_ok = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        mixed = "bf16" if cuda_ok or not torch.cuda.is_available() else "no"
    # On a machine without an accelerator, cpu=True makes torchrun / `accelerate launch --multi_gpu`
    # processes form a gloo (MULTI_CPU) group instead of each training alone.
    has_device = (
        torch.cuda.is_available()
        or torch.backends.mps.is_available()
        or (hasattr(torch, "xpu") and torch.xpu.is_available())
    )
    _allow_new_precision(mixed)
    accelerator = Accelerator(mixed_precision=mixed, cpu=not has_device)
    set_seed(config.seed)
    return accelerator


def _allow_new_precision(mixed: str) -> None:
    """Let one process run trainers with different ``bf16`` settings one after another.

    accelerate keeps its state in a process-wide singleton and refuses a second ``Accelerator``
    with another mixed precision; the distributed part (``PartialState``, the process group) is
    kept, only the precision part is reset.
    """
    from accelerate.state import AcceleratorState

    shared = AcceleratorState._shared_state
    if shared and shared.get("_mixed_precision", mixed) != mixed:
        AcceleratorState._reset_state(reset_partial_state=False)


def load_policy(config: TrainConfig, model: Any = None, tokenizer: Any = None) -> tuple[Any, Any]:
    """The model to train (fp32 master weights), with LoRA adapters if ``use_lora``."""
    from agenttrainer.models import apply_lora, create_lora_config, load_model_and_tokenizer

    if model is None:
        model, tokenizer = load_model_and_tokenizer(
            config.model_name_or_path, torch_dtype=torch.float32, gradient_checkpointing=config.gradient_checkpointing
        )
    elif tokenizer is None:
        raise ValueError("pass the tokenizer together with the model")
    elif config.gradient_checkpointing:
        # Non-reentrant, so gradients reach LoRA adapters whose layer inputs need no grad.
        # transformers 5 renamed gradient_checkpointing_enable to activation_checkpointing_enable.
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if config.use_lora:
        model = apply_lora(
            model,
            create_lora_config(
                config.lora_preset,
                r=config.lora_r,
                lora_alpha=config.lora_alpha,
                lora_dropout=config.lora_dropout,
                target_modules=config.lora_target_modules,
            ),
        )
    return model, tokenizer


def make_optimizer_and_scheduler(model: nn.Module, config: TrainConfig, total_steps: int) -> tuple[Any, Any]:
    """AdamW over the trainable parameters and the configured schedule over ``total_steps`` optimizer steps."""
    from transformers import get_scheduler

    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    # The fused kernel (CPU and CUDA) is ~3x faster than the per-tensor loop on a 135M model.
    fused = all(
        p.dtype in (torch.float32, torch.float16, torch.bfloat16) and p.device.type in ("cpu", "cuda") for p in params
    )
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay, fused=fused)
    name = "constant_with_warmup" if config.lr_scheduler == "constant" else config.lr_scheduler
    warmup = math.ceil(total_steps * config.warmup_ratio)
    scheduler = get_scheduler(name, optimizer, num_warmup_steps=warmup, num_training_steps=total_steps)
    return optimizer, scheduler


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

    def checkpoint(self, epoch: int, lm: Any, tokenizer: Any) -> None:
        """``checkpoint-<global_step>``: everything resume needs, loadable as a model."""
        from agenttrainer.checkpoints import save_checkpoint

        save_checkpoint(self.acc, self.model, self.optimizer, self.scheduler, self.config,
                        {**self.state, "epoch": epoch}, lm=lm, tokenizer=tokenizer)  # fmt: skip

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


def start_run(wrapped: nn.Module, config: TrainConfig, acc: Any, plan: list[list[Any]], state: dict[str, Any],
              desc: str, updates_per_window: int = 1) -> RunStart:  # fmt: skip
    """For a ``plan`` (per epoch, the batch windows; each window takes ``updates_per_window``
    optimizer steps): the step count (capped by ``max_steps``), optimizer and schedule over it, ``accelerate`` preparation, resume from the
    configured checkpoint (into ``state``), metrics logger and progress bar: one way for SFT,
    DPO and GRPO, so their resume and logging semantics cannot drift apart."""
    from tqdm.auto import tqdm

    from agenttrainer.checkpoints import load_checkpoint, resolve_checkpoint
    from agenttrainer.logging_backends import MetricsLogger

    total_steps = sum(len(windows) for windows in plan) * updates_per_window
    if config.max_steps > 0:
        total_steps = min(total_steps, config.max_steps)
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
    return RunStart(model, optimizer, scheduler, params, state, logger, bar, acc, config, total_steps)
