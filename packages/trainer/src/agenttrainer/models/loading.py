"""Load a causal LM and its tokenizer from an alias, a local checkpoint or a Hub id.

Everything in knowlyr-trainer that needs a model goes through ``load_model_and_tokenizer``:
the trainers, the inference bridge and the server. A checkpoint directory holding only a LoRA
adapter (``adapter_config.json``) is loaded onto its base model and merged, so callers always get
a plain transformers model back.

Example:
    >>> model, tokenizer = load_model_and_tokenizer("smollm2-135m")  # doctest: +SKIP
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from agenttrainer.models.aliases import MODEL_ALIASES, resolve_model_path
from agenttrainer.models.errors import ModelLoadError
from agenttrainer.models.prompt_contract import attach_contract, read_contract
from knowlyrcore.errors import require_extra

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def _as_dtype(torch_dtype: Any) -> Any:
    if torch_dtype is None or isinstance(torch_dtype, torch.dtype) or torch_dtype == "auto":
        return torch_dtype
    try:
        return _DTYPES[str(torch_dtype).lower()]
    except KeyError:
        raise ModelLoadError(f"unknown torch_dtype {torch_dtype!r}; use one of {sorted(_DTYPES)} or 'auto'") from None


def load_tokenizer(path: str) -> Any:
    """Load a tokenizer and make sure it can pad (causal LMs often ship without a pad token)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except OSError as exc:
        raise _unreachable(path, exc) from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _unreachable(path: str, exc: Exception) -> ModelLoadError:
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if Path(path).is_dir():
        return ModelLoadError(f"cannot load checkpoint {path}: {first_line}")
    return ModelLoadError(
        f"cannot load {path!r}: it is not a local directory nor an alias ({', '.join(sorted(MODEL_ALIASES))}), "
        f"and the Hugging Face Hub could not provide it ({first_line})"
    )


def _quantization_config(load_in_4bit: bool) -> Any:
    if not load_in_4bit:
        return None
    if not torch.cuda.is_available():
        raise ModelLoadError("load_in_4bit (QLoRA) needs a CUDA GPU for bitsandbytes 4-bit kernels; none is available")
    require_extra("bitsandbytes", "knowlyr-trainer", "qlora", "load_in_4bit (QLoRA)")
    from transformers import BitsAndBytesConfig

    # NF4 with double quantisation and bf16 compute is the QLoRA paper's recipe.
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )


def load_model_and_tokenizer(
    name_or_path: str,
    *,
    torch_dtype: Any = None,
    gradient_checkpointing: bool = False,
    load_in_4bit: bool = False,
) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)``; ``name_or_path`` is an alias, a checkpoint directory or a Hub id.

    ``torch_dtype``: a ``torch.dtype``, a name ("bf16", "float32", ...), "auto" or None (the
    checkpoint's stored dtype). ``gradient_checkpointing`` turns it on (non-reentrant, so it
    works with frozen base weights under LoRA) and disables the KV cache, which it conflicts with.
    ``load_in_4bit`` loads NF4 weights through bitsandbytes (CUDA only) for QLoRA.
    """
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(name_or_path)
    dtype = _as_dtype(torch_dtype)
    quantization = _quantization_config(load_in_4bit)

    adapter_config = Path(path) / "adapter_config.json"
    if Path(path).is_dir() and not adapter_config.is_file() and not (Path(path) / "config.json").is_file():
        raise ModelLoadError(f"cannot load checkpoint {path}: it has neither config.json nor adapter_config.json")
    if adapter_config.is_file():
        model, tokenizer = _load_adapter_checkpoint(Path(path), adapter_config, dtype, quantization)
    else:
        tokenizer = load_tokenizer(path)
        kwargs: dict[str, Any] = {"dtype": "auto" if dtype is None else dtype}
        if quantization is not None:
            kwargs["quantization_config"] = quantization
        try:
            model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        except OSError as exc:
            raise _unreachable(path, exc) from exc

    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if Path(path).is_dir():
        attach_contract(model, read_contract(path))  # how the checkpoint was trained to be prompted
    if gradient_checkpointing:
        # Non-reentrant checkpointing lets gradients reach LoRA adapters when the inputs need no grad.
        # transformers 5 renamed gradient_checkpointing_enable (now deprecated) to activation_checkpointing_enable.
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    return model, tokenizer


def _load_adapter_checkpoint(path: Path, adapter_config: Path, dtype: Any, quantization: Any) -> tuple[Any, Any]:
    PeftModel = require_extra("peft", "knowlyr-trainer", "peft", f"loading the LoRA adapter in {path}").PeftModel
    base = json.loads(adapter_config.read_text()).get("base_model_name_or_path")
    if not base:
        raise ModelLoadError(f"LoRA adapter {path} does not name its base model (base_model_name_or_path is empty)")
    base_model, _ = load_model_and_tokenizer(base, torch_dtype=dtype, load_in_4bit=quantization is not None)
    tokenizer = (
        load_tokenizer(str(path))
        if (path / "tokenizer_config.json").is_file()
        else load_tokenizer(resolve_model_path(base))
    )
    model = PeftModel.from_pretrained(base_model, str(path))
    if quantization is not None:  # 4-bit weights cannot absorb the adapter; keep it attached
        return model, tokenizer
    return model.merge_and_unload(), tokenizer
