"""save_model -> load_model_and_tokenizer round trips on the tiny model (merged and adapter-only)."""

from __future__ import annotations

import json

import pytest
import torch

from agenttrainer.models import ModelLoadError, apply_lora, build_tiny_model, load_model_and_tokenizer, save_model

# Merging W + BA changes the float32 summation order; logits of size ~0.5 move by ~1e-5.
ATOL = 1e-4
MESSAGES = [{"role": "user", "content": "List the files."}]


def _logits(model, tokenizer) -> torch.Tensor:
    batch = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        return model(**batch).logits  # (1, T, V)


def _trained_lora(model):
    """A LoRA model whose adapters are non-zero, so merging changes the weights."""
    torch.manual_seed(0)  # peft initialises lora_A from the global RNG
    lora_model = apply_lora(model, {"preset": "full", "r": 4, "lora_dropout": 0.0})
    with torch.no_grad():
        for name, param in lora_model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.5, generator=torch.Generator().manual_seed(0))
    return lora_model


def test_plain_model_round_trip(tmp_path):
    model, tokenizer = build_tiny_model(seed=3)
    out = save_model(model, tokenizer, tmp_path / "ckpt")
    assert (out / "model.safetensors").is_file()
    loaded, loaded_tok = load_model_and_tokenizer(str(out))
    assert torch.equal(_logits(loaded, loaded_tok), _logits(model, tokenizer))
    assert loaded_tok.chat_template == tokenizer.chat_template


def test_merged_lora_round_trip_leaves_the_training_model_intact(tmp_path):
    model, tokenizer = build_tiny_model()
    lora_model = _trained_lora(model)
    expected = _logits(lora_model, tokenizer)
    save_model(lora_model, tokenizer, tmp_path / "merged")
    assert not (tmp_path / "merged" / "adapter_config.json").exists()
    loaded, loaded_tok = load_model_and_tokenizer(str(tmp_path / "merged"))
    assert not hasattr(loaded, "peft_config")
    assert torch.allclose(_logits(loaded, loaded_tok), expected, atol=ATOL)
    # merging happened on a copy: the caller still trains adapters
    assert any("lora_A" in n and p.requires_grad for n, p in lora_model.named_parameters())
    assert torch.allclose(_logits(lora_model, tokenizer), expected)


def test_adapter_only_checkpoint_is_reattached_to_its_base(tmp_path):
    model, tokenizer = build_tiny_model()
    save_model(model, tokenizer, tmp_path / "base")
    base, base_tok = load_model_and_tokenizer(str(tmp_path / "base"))
    lora_model = _trained_lora(base)
    expected = _logits(lora_model, base_tok)
    save_model(lora_model, base_tok, tmp_path / "adapter", merge_lora=False)
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    assert not (tmp_path / "adapter" / "model.safetensors").exists()
    loaded, loaded_tok = load_model_and_tokenizer(str(tmp_path / "adapter"))
    assert torch.allclose(_logits(loaded, loaded_tok), expected, atol=ATOL)


def test_adapter_without_a_base_model_fails_clearly(tmp_path):
    model, tokenizer = build_tiny_model()  # built from a config: the adapter cannot name a base
    save_model(_trained_lora(model), tokenizer, tmp_path / "adapter", merge_lora=False)
    with pytest.raises(ModelLoadError, match="does not name its base model"):
        load_model_and_tokenizer(str(tmp_path / "adapter"))


def test_overwriting_replaces_stale_weights_and_keeps_other_files(tmp_path):
    model, tokenizer = build_tiny_model()
    save_model(model, tokenizer, tmp_path / "base")
    base, base_tok = load_model_and_tokenizer(str(tmp_path / "base"))
    lora_model = _trained_lora(base)
    out = tmp_path / "ckpt"
    save_model(lora_model, base_tok, out, merge_lora=False)
    (out / "trainer_state.json").write_text(json.dumps({"step": 10}))
    save_model(lora_model, base_tok, out)  # now merged
    assert not (out / "adapter_config.json").exists()
    assert (out / "trainer_state.json").is_file()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".ckpt.tmp-")]
    loaded, loaded_tok = load_model_and_tokenizer(str(out))
    assert torch.allclose(_logits(loaded, loaded_tok), _logits(lora_model, base_tok), atol=ATOL)


def test_checkpoint_saved_during_gradient_checkpointing_generates_with_the_kv_cache(tmp_path):
    model, tokenizer = build_tiny_model()
    save_model(model, tokenizer, tmp_path / "base")
    training, training_tok = load_model_and_tokenizer(str(tmp_path / "base"), gradient_checkpointing=True)
    assert training.config.use_cache is False
    save_model(training, training_tok, tmp_path / "ckpt")
    assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["use_cache"] is True
    assert training.config.use_cache is False  # the live training model is untouched
