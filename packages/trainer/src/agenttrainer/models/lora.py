"""LoRA presets and adapters (needs the ``peft`` extra: ``pip install 'knowlyr-trainer[peft]'``).

Presets name which Llama-style projections get adapters, from cheapest to most expressive:

* ``minimal``: ``q_proj``, ``v_proj`` (the original LoRA paper's choice);
* ``recommended``: all attention projections ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``;
* ``full``: attention plus the MLP ``gate_proj``, ``up_proj``, ``down_proj`` (QLoRA's choice).

Example:
    >>> config = create_lora_config("minimal", r=8)
    >>> sorted(config.target_modules)
    ['q_proj', 'v_proj']
"""

from __future__ import annotations

from typing import Any

from knowlyrcore.errors import require_extra

LORA_PRESETS: dict[str, tuple[str, ...]] = {
    "minimal": ("q_proj", "v_proj"),
    "recommended": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "full": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
}


def _peft() -> Any:
    return require_extra("peft", "knowlyr-trainer", "peft", "LoRA")


def create_lora_config(
    preset: str = "recommended",
    *,
    r: int = 16,
    lora_alpha: int = 32,
    lora_dropout: float = 0.05,
    target_modules: list[str] | tuple[str, ...] | None = None,
) -> Any:
    """A ``peft.LoraConfig`` for causal LM training; ``target_modules`` overrides the preset's."""
    if target_modules is None:
        if preset not in LORA_PRESETS:
            raise ValueError(f"unknown LoRA preset {preset!r}; choose one of {', '.join(LORA_PRESETS)}")
        target_modules = LORA_PRESETS[preset]
    if r <= 0:
        raise ValueError(f"LoRA rank r must be positive, got {r}")
    return _peft().LoraConfig(
        task_type="CAUSAL_LM",
        r=r,
        lora_alpha=lora_alpha,
        lora_dropout=lora_dropout,
        target_modules=list(target_modules),
        bias="none",
    )


def apply_lora(model: Any, config_or_preset: Any = "recommended") -> Any:
    """Wrap ``model`` with LoRA adapters; only the adapter weights stay trainable.

    ``config_or_preset``: a ``peft.LoraConfig``, a preset name, or a dict of
    ``create_lora_config`` keyword arguments (the YAML ``lora_config`` form, e.g. ``{"r": 8}``).
    """
    peft = _peft()
    if isinstance(config_or_preset, str):
        config = create_lora_config(config_or_preset)
    elif isinstance(config_or_preset, dict):
        config = create_lora_config(**config_or_preset)
    elif isinstance(config_or_preset, peft.LoraConfig):
        config = config_or_preset
    else:
        raise TypeError(
            f"apply_lora takes a LoraConfig, a preset name or a dict, got {type(config_or_preset).__name__}"
        )
    missing = _missing_targets(model, config.target_modules)
    if missing:
        raise ValueError(f"LoRA target modules {sorted(missing)} are not in {type(model).__name__}")
    checkpointing = _uses_checkpointing(model)
    if getattr(model, "is_loaded_in_4bit", False):
        # Casts norms to fp32 and enables input grads so gradients reach the adapters through 4-bit layers.
        model = peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=checkpointing)
    elif checkpointing:
        # With frozen embeddings the checkpointed blocks would see inputs without grad.
        model.enable_input_require_grads()
    return peft.get_peft_model(model, config)


def _uses_checkpointing(model: Any) -> bool:
    # transformers 5 renamed is_gradient_checkpointing (now deprecated) to is_activation_checkpointing.
    if hasattr(type(model), "is_activation_checkpointing"):
        return bool(model.is_activation_checkpointing)
    return bool(getattr(model, "is_gradient_checkpointing", False))


def _missing_targets(model: Any, targets: Any) -> set[str]:
    if isinstance(targets, str):  # a regex: let peft validate it
        return set()
    leaf_names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    return set(targets) - leaf_names
