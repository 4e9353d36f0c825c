"""``evaluate_model`` against a direct computation on a tiny model, the chunked head, and devices.

The direct computation runs the plain transformers forward on one example at a time and takes
``log_softmax`` over the full logits ``(T, V)``: ``loss = -sum_t log p(y_t) / n``, accuracy =
``mean_t [argmax_v logits_t == y_t]``, a DPO margin = ``sum log p(chosen) - sum log p(rejected)``,
a GRPO trajectory's score = its mean token log-prob. ``evaluate_model`` packs examples into one
row and applies the LM head chunk by chunk at label positions only; with ``bf16=False`` the two
agree to float32 rounding.
"""

import math

import pytest
import torch
from torch.overrides import TorchFunctionMode

from agenttrainer.data import tokenize_conversation
from agenttrainer.eval import _autocast, eval_device, evaluate_model, read_eval_data


def _token_logps(model, ex):
    """Full-vocabulary reference: ``(logps, hits)`` over the example's label positions."""
    with torch.no_grad():
        logits = model(torch.tensor([ex.input_ids])).logits[0, :-1].float()  # (T-1, V)
    labels = torch.tensor(ex.labels[1:])
    mask = labels != -100
    logp = torch.log_softmax(logits, -1)[mask].gather(-1, labels[mask][:, None]).squeeze(-1)
    return logp, (logits[mask].argmax(-1) == labels[mask]).float()


def test_sft_metrics_equal_a_direct_full_logit_computation(tiny, rows, tmp_path):
    model, tok = tiny
    path = rows.write(tmp_path / "sft.jsonl", rows.sft(5))
    data = read_eval_data(path)
    nll, hits, count = 0.0, 0.0, 0
    for conv in data.items:
        logp, hit = _token_logps(model, tokenize_conversation(tok, conv, max_length=2048))
        nll, hits, count = nll - float(logp.sum()), hits + float(hit.sum()), count + logp.numel()
    got = evaluate_model(model, tok, data, batch_size=2, bf16=False, device="cpu")
    assert got["eval/num_tokens"] == count
    assert got["eval/loss"] == pytest.approx(nll / count, rel=1e-5)
    assert got["eval/perplexity"] == pytest.approx(math.exp(nll / count), rel=1e-5)
    assert got["eval/token_accuracy"] == pytest.approx(hits / count, abs=1e-6)


def test_dpo_and_grpo_metrics_equal_a_direct_computation(tiny, rows, tmp_path):
    model, tok = tiny
    pairs = read_eval_data(rows.write(tmp_path / "dpo.jsonl", rows.dpo(3)))
    margins = [
        float(
            _token_logps(model, tokenize_conversation(tok, c, max_length=2048))[0].sum()
            - _token_logps(model, tokenize_conversation(tok, r, max_length=2048))[0].sum()
        )
        for c, r in pairs.items
    ]
    got = evaluate_model(model, tok, pairs, bf16=False, device="cpu")
    assert got["eval/logp_margin"] == pytest.approx(sum(margins) / 3, abs=1e-4)
    assert got["eval/preference_accuracy"] == sum(m > 0 for m in margins) / 3

    groups = read_eval_data(rows.write(tmp_path / "grpo.jsonl", rows.grpo(2, group=3)))
    means = [
        [float(_token_logps(model, tokenize_conversation(tok, c, max_length=2048))[0].mean()) for c in g]
        for g in groups.items
    ]
    got = evaluate_model(model, tok, groups, bf16=False, device="cpu")
    assert got["eval/mean_token_logp"] == pytest.approx(sum(map(sum, means)) / 6, abs=1e-5)
    top1 = [
        max(range(3), key=m.__getitem__) == max(range(3), key=lambda i: g[i].reward)
        for m, g in zip(means, groups.items)
    ]
    assert got["eval/top1_agreement"] == sum(top1) / 2


class _LogitRows(TorchFunctionMode):
    """Records the row count of every matmul whose output spans the vocabulary."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab, self.rows = vocab, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__) and out.shape[-1] == self.vocab:
            self.rows.append(out.shape[-2] if out.dim() > 1 else 1)
        return out


def test_chunked_head_gives_the_full_logit_numbers_with_chunk_sized_logits(tiny, rows, tmp_path):
    model, tok = tiny
    data = read_eval_data(rows.write(tmp_path / "sft.jsonl", rows.sft(4)))
    full = evaluate_model(model, tok, data, batch_size=4, bf16=False, device="cpu", chunk_size=1 << 20)
    spy = _LogitRows(model.config.vocab_size)
    with spy:
        chunked = evaluate_model(model, tok, data, batch_size=4, bf16=False, device="cpu", chunk_size=7)
    assert spy.rows and max(spy.rows) <= 7  # never a (tokens, V) block for the whole batch
    assert full["eval/num_tokens"] > 7
    for key in full:
        assert chunked[key] == pytest.approx(full[key], rel=1e-5), key


def test_device_defaults_and_autocast(tiny, monkeypatch, native_bf16):
    model, _ = tiny
    assert eval_device(model, "cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert eval_device(model) == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert eval_device(model) == torch.device("cuda")  # a CPU model is moved to the GPU when there is one
    with _autocast(torch.device("cpu"), True):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with _autocast(torch.device("cpu"), False):
        assert not torch.is_autocast_enabled("cpu")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert not isinstance(_autocast(torch.device("cuda"), True), torch.autocast)


def test_bf16_eval_runs_on_the_cpu_close_to_float32(tiny, rows, tmp_path, native_bf16):
    model, tok = tiny
    data = read_eval_data(rows.write(tmp_path / "sft.jsonl", rows.sft(3)))
    exact = evaluate_model(model, tok, data, bf16=False, device="cpu")
    mixed = evaluate_model(model, tok, data, bf16=True, device="cpu")
    assert mixed["eval/loss"] == pytest.approx(exact["eval/loss"], rel=2e-2)
