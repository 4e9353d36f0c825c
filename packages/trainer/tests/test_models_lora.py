"""LoRA presets and apply_lora on the tiny Llama model."""

from __future__ import annotations

import peft
import pytest
import torch

from agenttrainer.models import LORA_PRESETS, apply_lora, build_tiny_model, create_lora_config


def _adapted_modules(model) -> set[str]:
    return {name.rsplit(".", 2)[-2] for name, _ in model.named_parameters() if "lora_A" in name}


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        ("minimal", {"q_proj", "v_proj"}),
        ("recommended", {"q_proj", "k_proj", "v_proj", "o_proj"}),
        ("full", {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}),
    ],
)
def test_presets_adapt_exactly_their_modules(preset, expected):
    assert set(LORA_PRESETS[preset]) == expected
    model, _ = build_tiny_model()
    lora_model = apply_lora(model, preset)
    # parameter names look like ...self_attn.q_proj.lora_A.default.weight
    adapted = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in lora_model.named_parameters() if ".lora_A." in n}
    assert adapted == expected


def test_only_adapter_weights_are_trainable_and_start_as_identity():
    model, tokenizer = build_tiny_model()
    batch = tokenizer("hello world", return_tensors="pt")
    before = model(**batch).logits
    lora_model = apply_lora(model, create_lora_config("minimal", r=4, lora_alpha=8, lora_dropout=0.0))
    trainable = [n for n, p in lora_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    # LoRA's B matrix starts at zero, so the wrapped model computes the same function.
    assert torch.allclose(lora_model(**batch).logits, before)


def test_config_fields_and_dict_form():
    config = create_lora_config(r=8, lora_alpha=16, lora_dropout=0.1, target_modules=["q_proj"])
    assert isinstance(config, peft.LoraConfig)
    assert (config.r, config.lora_alpha, config.lora_dropout, set(config.target_modules)) == (8, 16, 0.1, {"q_proj"})
    assert config.task_type == "CAUSAL_LM"
    model, _ = build_tiny_model()
    lora_model = apply_lora(model, {"preset": "minimal", "r": 2})
    assert lora_model.peft_config["default"].r == 2


def test_bad_inputs_fail_clearly():
    with pytest.raises(ValueError, match="unknown LoRA preset 'huge'"):
        create_lora_config("huge")
    with pytest.raises(ValueError, match="rank"):
        create_lora_config(r=0)
    model, _ = build_tiny_model()
    with pytest.raises(ValueError, match=r"\['c_attn'\] are not in LlamaForCausalLM"):
        apply_lora(model, create_lora_config(target_modules=["q_proj", "c_attn"]))
    with pytest.raises(TypeError, match="apply_lora takes"):
        apply_lora(model, 16)


def test_gradients_reach_adapters_under_gradient_checkpointing():
    model, tokenizer = build_tiny_model()
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    lora_model = apply_lora(model, "recommended")
    batch = tokenizer("a b c d", return_tensors="pt")
    lora_model(**batch, labels=batch["input_ids"]).loss.backward()
    grads = [p.grad for n, p in lora_model.named_parameters() if "lora_B" in n]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)
