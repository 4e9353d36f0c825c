"""load_model_and_tokenizer options and error messages (tiny checkpoints; no SmolLM2 weights)."""

from __future__ import annotations

import huggingface_hub.constants
import pytest
import torch

from agenttrainer.models import ModelLoadError, build_tiny_model, load_model_and_tokenizer, save_model


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    model, tokenizer = build_tiny_model()
    return str(save_model(model, tokenizer, tmp_path_factory.mktemp("tiny") / "ckpt"))


@pytest.mark.parametrize(
    ("dtype", "expected"), [("bf16", torch.bfloat16), (torch.float16, torch.float16), (None, torch.float32)]
)
def test_dtype(tiny_checkpoint, dtype, expected):
    model, _ = load_model_and_tokenizer(tiny_checkpoint, torch_dtype=dtype)
    assert model.dtype == expected


def test_unknown_dtype_is_rejected(tiny_checkpoint):
    with pytest.raises(ModelLoadError, match="unknown torch_dtype 'int3'"):
        load_model_and_tokenizer(tiny_checkpoint, torch_dtype="int3")


def test_gradient_checkpointing_turns_off_the_kv_cache(tiny_checkpoint):
    model, _ = load_model_and_tokenizer(tiny_checkpoint, gradient_checkpointing=True)
    assert model.is_activation_checkpointing
    assert model.config.use_cache is False


def test_tokenizer_gets_a_pad_token_when_the_checkpoint_has_none(tmp_path):
    model, tokenizer = build_tiny_model()
    tokenizer.pad_token = None
    save_model(model, tokenizer, tmp_path / "ckpt")
    _, loaded = load_model_and_tokenizer(str(tmp_path / "ckpt"))
    assert loaded.pad_token == loaded.eos_token


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
def test_4bit_without_cuda_says_why(tiny_checkpoint):
    with pytest.raises(ModelLoadError, match="needs a CUDA GPU"):
        load_model_and_tokenizer(tiny_checkpoint, load_in_4bit=True)


def test_unreachable_hub_id_gives_one_readable_line(monkeypatch):
    # Offline mode fails at once instead of retrying DNS; the message is the same either way.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError, match="not a local directory nor an alias") as info:
        load_model_and_tokenizer("knowlyr-test/no-such-model")
    assert "\n" not in str(info.value)
    assert "smollm2-135m" in str(info.value)


def test_directory_without_a_model_fails_clearly(tmp_path):
    with pytest.raises(ModelLoadError, match=f"cannot load checkpoint {tmp_path}"):
        load_model_and_tokenizer(str(tmp_path))
