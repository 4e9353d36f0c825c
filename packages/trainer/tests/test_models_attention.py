"""Per-sequence attention of packed rows (agenttrainer.models.attention): the explicit (short) and flash (long) paths equal SDPA."""

import pytest
import torch
import torch.nn.functional as F

from agenttrainer.models import attention


def _qkv(length, hq=6, hkv=2, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, h, length, dim, generator=g, requires_grad=True) for h in (hq, hkv, hkv)]


@pytest.mark.parametrize("length", [1, 7, 40])
def test_explicit_and_flash_paths_equal_sdpa_values_and_grads(monkeypatch, length):
    monkeypatch.setattr(attention, "_EXPLICIT_ATTENTION_MAX_LEN", 16)  # 1 and 7 explicit, 40 flash
    q, k, v = _qkv(length)
    out = attention._causal_attention(q, k, v, scale=0.3, dropout=0.0)
    out.square().sum().backward()
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3, enable_gqa=True)
    ref.square().sum().backward()
    assert torch.allclose(out, ref, atol=1e-5)
    for g, t in zip(got, (q, k, v)):
        assert torch.allclose(g, t.grad, atol=1e-5)


def test_softcap_matches_hand_computed_attention():
    """Scores s -> c * tanh(s / c) before the causal softmax (Gemma-2), with c = 2."""
    q, k, v = _qkv(5, hq=2, hkv=2)
    out = attention._causal_attention(q, k, v, scale=1.0, dropout=0.0, softcap=2.0)
    s = 2.0 * torch.tanh((q @ k.transpose(-1, -2)) / 2.0)
    s = s.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    assert torch.allclose(out, torch.softmax(s, -1) @ v, atol=1e-6)


def test_packed_rows_never_attend_across_sequences():
    """Changing sequence 0's keys/values leaves sequence 1's output unchanged."""
    q, k, v = _qkv(12)
    cu = torch.tensor([0, 5, 12])

    class Module:
        training = False

    def run(key):
        out, _ = attention._packed_sdpa(Module(), q, key, v, None, cu_seq_lens_q=cu, scaling=None)
        return out  # (1, N, H, D)

    k2 = k.detach().clone()
    k2[:, :, :5] += 10.0
    assert torch.allclose(run(k)[:, 5:], run(k2)[:, 5:], atol=1e-6)
    assert not torch.allclose(run(k)[:, :5], run(k2)[:, :5])


def test_sliding_window_longer_than_window_is_a_clear_error():
    q, k, v = _qkv(12)

    class Module:
        training = False

    with pytest.raises(ValueError, match="sliding-window"):
        attention._packed_sdpa(Module(), q, k, v, None, cu_seq_lens_q=torch.tensor([0, 12]), sliding_window=8)


def test_autocast_attention_runs_in_bf16_and_matches_padded_sdpa(monkeypatch):
    """Under bf16 autocast q/k/v reach the packed kernel in bf16 (rotary leaves q/k in float32),
    and the packed forward stays within bf16 noise of transformers' padded SDPA path."""
    from agenttrainer.data import pack, pad, sft_conversation, tokenize_conversation
    from agenttrainer.models import build_tiny_model

    model, tok = build_tiny_model(seed=0)
    module = attention.HiddenStates(model).eval()
    seen = []
    real = attention._causal_attention

    def spy(q, k, v, *args, **kwargs):
        seen.append((q.dtype, k.dtype, v.dtype))
        return real(q, k, v, *args, **kwargs)

    monkeypatch.setattr(attention, "_causal_attention", spy)
    rows = [
        {"instruction": "fix the off-by-one in parse()", "response": "Action: run_tests"},
        {"instruction": "x", "response": "y"},
    ]
    exs = [tokenize_conversation(tok, sft_conversation(r, f"f:{i}")) for i, r in enumerate(rows)]
    packed, padded = pack(exs), pad(exs, pad_token_id=tok.pad_token_id)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        hp = module(packed["input_ids"], packed["position_ids"], packed["seq_ids"]).float()
        hd = module(padded["input_ids"], padded["position_ids"], padded["seq_ids"]).float()
    assert seen and set(seen) == {(torch.bfloat16,) * 3}
    for i, ex in enumerate(exs):
        a, b = hp[0, packed["seq_ids"][0] == i], hd[i, : len(ex)]
        assert ((a - b).norm() / b.norm()).item() < 2e-2
