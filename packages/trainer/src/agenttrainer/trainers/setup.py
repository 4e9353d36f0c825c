"""What a recipe builds before its loop: the accelerator, the policy (with LoRA), the optimizer and schedule."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from agenttrainer.config import RunConfig, TrainConfig
from agenttrainer.models.attention import HiddenStates
from agenttrainer.precision import resolve_bf16, resolve_fp16


def make_accelerator(config: RunConfig) -> Any:
    """An ``accelerate.Accelerator`` with fp16 autocast when asked for (CUDA only, else a ``ConfigError``),
    or bf16 autocast when asked for and native (``precision``)."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    device = "cuda" if torch.cuda.is_available() else "cpu"
    # fp16: accelerate adds the gradient scaler and clip_grad_norm_ unscales first
    mixed = "fp16" if resolve_fp16(config.fp16, device) else "bf16" if resolve_bf16(config.bf16, device) else "no"
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


def load_policy(config: RunConfig, model: Any = None, tokenizer: Any = None) -> tuple[Any, Any]:
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
    lora = config.lora
    if lora.use_lora:
        model = apply_lora(
            model,
            create_lora_config(
                lora.lora_preset,
                r=lora.lora_r,
                lora_alpha=lora.lora_alpha,
                lora_dropout=lora.lora_dropout,
                target_modules=lora.lora_target_modules,
            ),
        )
    return model, tokenizer


def make_optimizer_and_scheduler(model: nn.Module, config: RunConfig, total_steps: int) -> tuple[Any, Any]:
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


class Recipe:
    """What every recipe does before its loop, in this order: check the extras and the output
    directory, read and check all its data (so bad input fails in seconds, before the slow model
    load), then the accelerator and the policy.

    A recipe subclasses it and implements ``read_data()`` and ``train()`` (and ``load_model()``
    when it trains something other than a causal LM); pass ``model`` / ``tokenizer`` to train an
    already loaded model.
    """

    def __init__(self, config: TrainConfig, *, model: Any = None, tokenizer: Any = None):
        from agenttrainer.trainers.output_dir import check_extras, check_output_dir, claim_output_dir

        self.config = config
        check_extras(config)
        check_output_dir(config)
        self.data = self.read_data() if config.train_file else None
        self.accelerator = make_accelerator(config)
        claim_output_dir(config, main_process=self.accelerator.is_main_process)
        self.load_model(model, tokenizer)

    def load_model(self, model: Any, tokenizer: Any) -> None:
        """Set ``model`` (what is saved), ``tokenizer`` and ``wrapped`` (what the loop runs): the
        policy, with LoRA when asked for, and its forward pass that stops before the LM head."""
        self.model, self.tokenizer = load_policy(self.config, model, tokenizer)
        self.wrapped = HiddenStates(self.model)

    def read_data(self) -> Any:
        """Every record the run will use, read and checked; no model needed."""
        raise NotImplementedError
