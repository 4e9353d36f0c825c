"""Leaf helpers the recipes share: model setup, the hidden-state forward, schedules, checkpoints.

Kept flat on purpose — each recipe reads top to bottom and calls these by name.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agenttrainer.config import TrainConfig
from agenttrainer.models.attention import (  # noqa: F401  (re-exported for the recipes and online/)
    _EXPLICIT_ATTENTION_MAX_LEN,
    PACKED_ATTENTION,
    HiddenStates,
    _causal_attention,
    _packed_sdpa,
)
from agenttrainer.models.attention import base_model as _base  # noqa: F401
from agenttrainer.packed import sequence_sums, to_device, unpack_tokens  # noqa: F401

CHECKPOINT_PREFIX = "checkpoint-"


class NonFiniteLossError(FloatingPointError):
    """A NaN/Infinity loss or gradient norm, raised before the optimizer step that would apply it."""


def check_finite(step: int, loss: float, grad_norm: float | torch.Tensor | None = None) -> None:
    """Refuse optimizer step ``step`` when ``loss`` (reduced over processes) or the gradient norm is
    not finite: one such step turns every weight into NaN, and the run would then save them.

    >>> check_finite(3, float("nan"))
    Traceback (most recent call last):
    ...
    agenttrainer.trainers.common.NonFiniteLossError: step 3: loss is nan; stopped before the optimizer step (nothing from this step on is saved)
    """
    if not math.isfinite(loss):
        raise NonFiniteLossError(
            f"step {step}: loss is {loss}; stopped before the optimizer step (nothing from this step on is saved)"
        )
    if grad_norm is not None and not math.isfinite(float(grad_norm)):
        raise NonFiniteLossError(
            f"step {step}: gradient norm is {float(grad_norm)}; stopped before the optimizer step "
            "(nothing from this step on is saved)"
        )


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


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


def _rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "torch": torch.get_rng_state()}


def save_checkpoint(
    accelerator: Any, model: nn.Module, optimizer: Any, scheduler: Any, config: TrainConfig, state: dict[str, Any]
) -> Path:
    """Write ``checkpoint-<step>`` atomically: a temp directory renamed into place when complete.

    Holds the trainable weights, optimizer, scheduler, each process's RNG state and the trainer
    state (step, data position, best eval). Old checkpoints beyond ``save_total_limit`` are removed.
    """
    root = Path(config.output_dir)
    final = root / f"{CHECKPOINT_PREFIX}{state['global_step']}"
    tmp = root / f".tmp-{CHECKPOINT_PREFIX}{state['global_step']}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    torch.save(_rng_state(), tmp / f"rng-{accelerator.process_index}.pt")
    if accelerator.is_main_process:
        torch.save(trainable_state(accelerator.unwrap_model(model)), tmp / "trainable.pt")
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        for f in tmp.iterdir():  # data reaches the disk before the rename makes it visible
            with f.open("rb") as fh:
                os.fsync(fh.fileno())
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        kept = sorted(list_checkpoints(root), key=lambda p: int(p.name[len(CHECKPOINT_PREFIX) :]))
        for old in kept[: max(len(kept) - config.save_total_limit, 0)] if config.save_total_limit else []:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def list_checkpoints(root: Path) -> list[Path]:
    return [
        p
        for p in root.glob(f"{CHECKPOINT_PREFIX}*")
        if p.is_dir() and p.name[len(CHECKPOINT_PREFIX) :].isdigit() and (p / "trainer_state.json").is_file()
    ]


def resolve_checkpoint(config: TrainConfig) -> Path | None:
    if not config.resume_from_checkpoint:
        return None
    if config.resume_from_checkpoint == "latest":
        found = list_checkpoints(Path(config.output_dir))
        return max(found, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX) :])) if found else None
    path = Path(config.resume_from_checkpoint)
    if not (path / "trainer_state.json").is_file():
        raise FileNotFoundError(f"resume_from_checkpoint={path}: not a checkpoint (no trainer_state.json)")
    return path


def load_checkpoint(path: Path, accelerator: Any, model: nn.Module, optimizer: Any, scheduler: Any) -> dict[str, Any]:
    """Restore what :func:`save_checkpoint` wrote; returns the trainer state."""
    weights = torch.load(path / "trainable.pt", map_location="cpu")
    params = dict(accelerator.unwrap_model(model).named_parameters())
    missing = [n for n, p in params.items() if p.requires_grad and n not in weights]
    if missing:
        raise ValueError(
            f"{path}: checkpoint lacks trainable parameters {missing[:3]} (different model or LoRA setup?)"
        )
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location="cpu", weights_only=False))
    scheduler.load_state_dict(torch.load(path / "scheduler.pt", map_location="cpu", weights_only=False))
    rng_file = path / f"rng-{accelerator.process_index}.pt"
    if rng_file.exists():
        rng = torch.load(rng_file, weights_only=False)
        random.setstate(rng["python"])
        torch.set_rng_state(rng["torch"])
    return json.loads((path / "trainer_state.json").read_text())


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
