"""Leaf helpers the recipes share: model setup, the hidden-state forward, schedules, checkpoints.

Kept flat on purpose — each recipe reads top to bottom and calls these by name.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from agenttrainer.checkpoints import (  # noqa: F401  (re-exported for the recipes and online/)
    CHECKPOINT_PREFIX,
    list_checkpoints,
    load_checkpoint,
    resolve_checkpoint,
    save_checkpoint,
    trainable_state,
)
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
