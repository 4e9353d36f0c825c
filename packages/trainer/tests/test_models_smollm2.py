"""The embedded SmolLM2-135M-Instruct: GGUF conversion, chat template, generation, LoRA round trip.

Integration tier: these touch the real 135M weights (conversion ~20 s on 2 CPU cores).
    pytest packages/trainer/tests/test_models_smollm2.py -m integration
"""

from __future__ import annotations

import json

import pytest
import torch

from agenttrainer.models import (
    TOOL_CHAT_TEMPLATE,
    apply_lora,
    load_model_and_tokenizer,
    load_tokenizer,
    resolve_model_path,
    save_model,
)
from agenttrainer.models.aliases import SMOLLM2_135M
from agenttrainer.models.convert import SOURCE_FILE, find_gguf

pytestmark = pytest.mark.integration

CONVERSATIONS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}],
    [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another."},
    ],
]


def test_first_use_converts_into_the_cache_once(tmp_path, monkeypatch):
    import gguf

    monkeypatch.setenv("KNOWLYR_CACHE", str(tmp_path))
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    path = resolve_model_path("SmolLM2-135M-Instruct")
    # the conversion parses the file once (memoised gguf functions) and puts gguf back as it was
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader, name_map)
    target = tmp_path / "models" / "smollm2-135m"
    assert path == str(target)
    config = json.loads((target / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert json.loads((target / SOURCE_FILE).read_text())["gguf_file"] == SMOLLM2_135M.gguf_file
    assert [p.name for p in tmp_path.joinpath("models").iterdir() if ".tmp-" in p.name] == []
    weights_mtime = (target / "model.safetensors").stat().st_mtime_ns
    assert resolve_model_path("smollm2-135m") == path
    assert (target / "model.safetensors").stat().st_mtime_ns == weights_mtime  # not converted again


def test_tool_template_renders_plain_chats_exactly_like_the_gguf_template():
    from transformers import AutoTokenizer

    gguf = find_gguf(SMOLLM2_135M)
    original = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    converted = load_tokenizer(resolve_model_path("smollm2-135m"))
    assert converted.chat_template == TOOL_CHAT_TEMPLATE
    for messages in CONVERSATIONS:
        for prompt in (True, False):
            expected = original.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt)
            assert converted.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt) == expected


@pytest.fixture(scope="module")
def smollm2():
    return load_model_and_tokenizer("smollm2-135m")


def test_greedy_answer_is_sensible(smollm2):
    model, tokenizer = smollm2
    batch = tokenizer.apply_chat_template(
        CONVERSATIONS[0], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**batch, max_new_tokens=16, do_sample=False)  # (1, T + new)
    answer = tokenizer.decode(out[0, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "4" in answer
    assert out[0, -1].item() == tokenizer.convert_tokens_to_ids("<|im_end|>")  # stops at end of turn


def test_lora_merge_save_and_reload(smollm2, tmp_path):
    model, tokenizer = smollm2
    torch.manual_seed(0)
    lora_model = apply_lora(model, {"preset": "minimal", "r": 4, "lora_dropout": 0.0})
    with torch.no_grad():
        for name, param in lora_model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.02)
    batch = tokenizer.apply_chat_template(
        CONVERSATIONS[1], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        expected = lora_model(**batch).logits  # (1, T, V)
    save_model(lora_model, tokenizer, tmp_path / "merged")
    loaded, loaded_tok = load_model_and_tokenizer(str(tmp_path / "merged"), torch_dtype="float32")
    with torch.no_grad():
        got = loaded(**batch).logits
    assert torch.allclose(got, expected, atol=1e-3)
    assert loaded_tok.chat_template == TOOL_CHAT_TEMPLATE
    lora_model.unload()  # give the shared fixture model back without adapters
