"""``AgentInference.from_pretrained(device=...)``: the model and every prompt go to that device."""

import torch

from agenttrainer.acting import generators
from agenttrainer.acting.inference import AgentInference

MESSAGES = [{"role": "user", "content": "list the files"}]


def test_explicit_cpu_device_generates(tiny_path):
    engine = AgentInference.from_pretrained(tiny_path, device="cpu", max_new_tokens=4)
    assert engine.model.device == torch.device("cpu")
    assert engine.encode(MESSAGES).device == torch.device("cpu")
    assert engine.complete(MESSAGES).completion_tokens > 0


def test_the_device_is_honoured_for_model_and_prompt(tiny_path):
    # "meta" stands in for an accelerator: the weights and the encoded prompt both land there.
    engine = AgentInference.from_pretrained(tiny_path, device="meta")
    assert {p.device.type for p in engine.model.parameters()} == {"meta"}
    assert engine.encode(MESSAGES).device.type == "meta"


def test_default_device_is_cuda_when_available(tiny, monkeypatch):
    model, tok = tiny
    moved = []
    monkeypatch.setattr(generators, "load_model_and_tokenizer", lambda *args, **kwargs: (model, tok))
    monkeypatch.setattr(model, "to", lambda device: moved.append(device) or model)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    AgentInference.from_pretrained("any")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    AgentInference.from_pretrained("any")
    assert moved == ["cuda", "cpu"]
