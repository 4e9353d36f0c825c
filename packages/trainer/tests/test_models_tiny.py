"""build_tiny_model: deterministic, SmolLM2-shaped, with the real tokenizer and chat template."""

from __future__ import annotations

import torch

from agenttrainer.models import build_tiny_model


def test_same_seed_same_weights_different_seed_different_weights():
    a, _ = build_tiny_model(seed=0)
    b, _ = build_tiny_model(seed=0)
    c, _ = build_tiny_model(seed=1)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.model.layers[0].self_attn.q_proj.weight, c.model.layers[0].self_attn.q_proj.weight)


def test_global_rng_is_left_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model(seed=7)
    assert torch.equal(torch.rand(3), expected)


def test_shape_follows_arguments_and_uses_grouped_query_attention():
    model, tokenizer = build_tiny_model(hidden_size=48, num_layers=3, num_heads=6)
    assert len(model.model.layers) == 3
    attn = model.model.layers[0].self_attn
    assert attn.q_proj.weight.shape == (48, 48)
    assert attn.k_proj.weight.shape == (24, 48)  # 3 KV heads of size 8
    assert model.config.vocab_size == len(tokenizer)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied like SmolLM2


def test_tokenizer_is_smollm2s_with_a_pad_token_and_a_per_call_copy():
    _, tok_a = build_tiny_model()
    _, tok_b = build_tiny_model()
    assert tok_a.pad_token is not None
    assert tok_a.eos_token == "<|im_end|>"
    tok_a.padding_side = "left"
    tok_b.padding_side = "right"
    assert tok_a.padding_side == "left"  # mutating one test's tokenizer does not leak into another's


def test_forward_pass_gives_logits_over_the_vocabulary():
    model, tokenizer = build_tiny_model()
    batch = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    logits = model(**batch).logits  # (1, T, V)
    assert logits.shape == (1, batch["input_ids"].shape[1], len(tokenizer))
    assert torch.isfinite(logits).all()
