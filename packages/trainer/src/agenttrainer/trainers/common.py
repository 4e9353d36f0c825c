"""Leaf helpers the recipes share: model setup, the hidden-state forward, schedules, checkpoints.

Kept flat on purpose — each recipe reads top to bottom and calls these by name.
"""

from __future__ import annotations

import functools
import itertools
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
from agenttrainer.data.batching import attention_allowed, attention_bias
from agenttrainer.losses.sft import compute_dtype

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


def _base(lm: Any) -> Any:
    return lm.get_base_model() if hasattr(lm, "get_base_model") else lm


PACKED_ATTENTION = "knowlyr_packed"


# Up to this length, explicit attention (two batched matmuls and a softmax in the compute dtype)
# beats the CPU flash kernel, forward + backward, by 1.4-4x on this project's 2-core AMX machine
# (bf16, 9 query / 3 kv heads: 2.9 vs 6.2 ms at 315 tokens, 24 vs 33 ms at 1024); beyond it flash's
# O(L) memory and tiling win.
_EXPLICIT_ATTENTION_MAX_LEN = 1024


@functools.lru_cache(maxsize=16)
def _causal_bias(length: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``(L, L)`` additive mask: 0 on and below the diagonal, -inf above (shared by every layer)."""
    future = torch.ones(length, length, dtype=torch.bool, device=device).triu_(1)
    return torch.zeros(length, length, dtype=dtype, device=device).masked_fill_(future, float("-inf"))


def _causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, dropout: float, softcap: float | None = None
) -> torch.Tensor:
    """Causal attention of one sequence: ``q (1, Hq, L, D)``, ``k``/``v`` ``(1, Hkv, L, D)`` -> ``(1, Hq, L, D)``.

    The explicit path keeps the softmax in the compute dtype: PyTorch accumulates a bf16 softmax in
    float32 and rounds once, which is what transformers' eager attention does under autocast
    (float32 softmax, then a cast to bf16) to within one bf16 ulp, at a third of the memory passes.
    """
    _, hq, length, dim = q.shape
    hkv = k.shape[1]
    if length > _EXPLICIT_ATTENTION_MAX_LEN and softcap is None:
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=dropout, scale=scale, enable_gqa=hkv != hq
        )
    group = hq // hkv  # query heads sharing a key/value head (GQA): one matmul per kv head
    scores = (q * scale).reshape(1, hkv, group * length, dim) @ k.transpose(-1, -2)  # (1, Hkv, G*L, L)
    scores = scores.view(1, hkv, group, length, length)
    if softcap is not None:  # Gemma-2 style logit soft-capping
        scores = torch.tanh(scores / softcap) * softcap
    probs = torch.softmax(scores + _causal_bias(length, scores.dtype, scores.device), dim=-1)
    if dropout:
        probs = torch.nn.functional.dropout(probs, p=dropout)
    return (probs.view(1, hkv, group * length, length) @ v).view(1, hq, length, dim)


def _packed_sdpa(
    module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any, **kwargs: Any
):
    """Causal attention over each packed sequence separately (no cross-sequence attention, no wasted blocks).

    ``cu_seq_lens_q`` (sequence boundaries in the packed row) selects this path; without it the
    call is plain transformers SDPA, so generation and padded batches behave as with ``sdpa``.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    cu = kwargs.get("cu_seq_lens_q")
    if cu is None or query.shape[0] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    bounds = cu.tolist()
    window = kwargs.get("sliding_window")
    longest = max(e - s for s, e in itertools.pairwise(bounds))
    if window is not None and longest > window:
        raise ValueError(
            f"packed training does not implement sliding-window attention: a sequence of {longest} tokens "
            f"exceeds the model's window of {window}; set max_length <= {window} or packing=False"
        )
    dropout = kwargs.get("dropout", 0.0) if module.training else 0.0
    scale = kwargs.get("scaling")
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    # Under autocast, rotary embeddings leave q/k in float32 while v is bf16; cast all three once to
    # the autocast dtype (what SDPA and the matmuls would each do again per call).
    dtype = compute_dtype(query, query.dtype)
    query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
    outs = [
        _causal_attention(query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], scale, dropout, kwargs.get("softcap"))
        for s, e in itertools.pairwise(bounds)
    ]  # each (1, H, L_i, D)
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous(), None  # (1, N, H, D)


def _register_packed_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(PACKED_ATTENTION, _packed_sdpa)
    AttentionMaskInterface.register(PACKED_ATTENTION, sdpa_mask)


class HiddenStates(nn.Module):
    """Runs a causal LM's backbone and returns final hidden states ``(B, T, H)``.

    The LM head is applied by the loss (chunked, label positions only), so full logits never
    exist. Wrapping (rather than calling the backbone directly) keeps DDP's gradient hooks intact.

    Packed rows (``B == 1``) on an SDPA model run attention per sequence through
    ``PACKED_ATTENTION`` (a superset of SDPA, so the model still generates normally): cost is
    ``sum(L_i^2)``, not ``(sum L_i)^2``. Other layouts get an explicit block-diagonal mask.
    """

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm
        config = _base(lm).config
        if getattr(config, "_attn_implementation", None) == "sdpa":
            _register_packed_attention()
            config._attn_implementation = PACKED_ATTENTION

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, seq_ids: torch.Tensor) -> torch.Tensor:
        base = _base(self.lm)
        backbone = getattr(base, base.base_model_prefix)
        impl = getattr(base.config, "_attn_implementation", None)
        if impl == PACKED_ATTENTION and seq_ids.shape[0] == 1 and bool((seq_ids >= 0).all()):
            counts = torch.bincount(seq_ids[0])
            cu = torch.cat([counts.new_zeros(1), counts.cumsum(0)])  # sequence boundaries
            out = backbone(input_ids=input_ids, position_ids=position_ids, use_cache=False, cu_seq_lens_q=cu)
            return out.last_hidden_state
        if impl in ("sdpa", PACKED_ATTENTION):
            mask = attention_allowed(seq_ids)[:, None]  # (B, 1, T, T) bool: a quarter of a float mask
        else:
            mask = attention_bias(seq_ids, torch.float32)  # (B, 1, T, T) additive, for eager attention
        out = backbone(input_ids=input_ids, position_ids=position_ids, attention_mask=mask, use_cache=False)
        return out.last_hidden_state

    def lm_head(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        head = _base(self.lm).get_output_embeddings()
        return head.weight, head.bias


def sequence_sums(values: torch.Tensor, mask: torch.Tensor, seq_ids: torch.Tensor, num_seqs: int) -> torch.Tensor:
    """Sum per-token ``values`` ``(B, T-1)`` per sequence (label positions only) -> ``(num_seqs,)``."""
    sid = seq_ids[:, 1:][mask]  # sequence of each label token
    return torch.zeros(num_seqs, dtype=values.dtype, device=values.device).index_add(0, sid, values[mask])


def unpack_tokens(values: torch.Tensor, mask: torch.Tensor, seq_ids: torch.Tensor, num_seqs: int) -> torch.Tensor:
    """Label-position values of a packed batch as a right-padded ``(num_seqs, L_max)`` tensor."""
    sid = seq_ids[:, 1:][mask]  # (N,), non-decreasing within each row
    counts = torch.bincount(sid, minlength=num_seqs)
    starts = torch.cumsum(counts, 0) - counts
    pos = torch.arange(sid.numel(), device=sid.device) - starts[sid]
    out = torch.zeros(num_seqs, int(counts.max()) if sid.numel() else 0, dtype=values.dtype, device=values.device)
    return out.index_put((sid, pos), values[mask])


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


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
