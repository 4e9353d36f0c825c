"""Shared fixtures: tiny random SmolLM2-shaped models and small JSONL data sets."""

import json
import random
import sys
from pathlib import Path

import pytest
import torch

# --import-mode=importlib puts nothing on sys.path; the shared test helpers (small_online) live beside this file.
sys.path.insert(0, str(Path(__file__).parent))


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    return path


def sft_rows(n=8, seed=0):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        steps = [
            {
                "thought": f"think {i} {j}",
                "action": f"run cmd{rng.randint(0, 99)}",
                "observation": f"out {rng.randint(0, 999)}",
                "reward": round(rng.uniform(0.1, 1.0), 3),
            }
            for j in range(rng.randint(1, 3))
        ]
        rows.append({"instruction": f"Task {i}: fix bug", "steps": steps, "task_id": f"t{i}", "reward": 0.5})
    return rows


def dpo_rows(n=8, seed=0):
    rng = random.Random(seed)
    return [
        {
            "prompt": f"Task {i}: list files",
            "chosen": f"Thought: look\nAction: ls -la {rng.randint(0, 9)}",
            "rejected": f"Action: rm -rf {rng.randint(0, 99)}",
            "task_id": f"t{i}",
        }
        for i in range(n)
    ]


def grpo_rows(n=6, group=4, seed=0):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        trajs = []
        for k in range(group):
            ns = rng.randint(1, 3)
            resp = "\n".join(
                f"Step {j + 1}:\nThought: t{k}{j}\nAction: cmd {rng.randint(0, 9)}\nObservation: o{j}"
                for j in range(ns)
            )
            trajs.append(
                {"response": resp, "reward": rng.random(), "step_rewards": [rng.uniform(0.1, 1) for _ in range(ns)]}
            )
        rows.append({"task_id": f"t{i}", "prompt": f"Task {i}", "trajectories": trajs})
    return rows


@pytest.fixture
def native_bf16(monkeypatch):
    """Take the bf16 code paths as on a CPU with native bf16 (AMX, AVX512-BF16), whatever this one has."""
    import agenttrainer.precision

    monkeypatch.setattr(agenttrainer.precision, "cpu_has_native_bf16", lambda: True)


@pytest.fixture
def sampled(monkeypatch):
    """``(prompt ids, sampled ids)`` of every answer the local generator gives in the test, in the
    order it was asked: what a writer of sampled records must keep."""
    from agenttrainer.acting import LocalGenerator

    drawn = []
    generate = LocalGenerator.generate

    def spy(self, prompts, **kwargs):
        samples = generate(self, prompts, **kwargs)
        drawn.extend((list(prompt), sample.token_ids) for prompt, sample in zip(prompts, samples))
        return samples

    monkeypatch.setattr(LocalGenerator, "generate", spy)
    return drawn


@pytest.fixture
def tiny():
    """A fresh tiny random Llama (same weights every call) and the real SmolLM2 tokenizer."""
    from agenttrainer.models import build_tiny_model

    return build_tiny_model(seed=0)


@pytest.fixture(scope="session")
def tokenizer():
    from agenttrainer.models import build_tiny_model

    return build_tiny_model()[1]


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory):
    """The tiny model saved as a checkpoint directory (for subprocess and CLI runs)."""
    from agenttrainer.models import build_tiny_model, save_model

    model, tok = build_tiny_model(seed=0)
    return str(save_model(model, tok, tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture
def sft_file(tmp_path):
    return str(write_jsonl(tmp_path / "sft.jsonl", sft_rows()))


@pytest.fixture
def dpo_file(tmp_path):
    return str(write_jsonl(tmp_path / "dpo.jsonl", dpo_rows()))


@pytest.fixture
def grpo_file(tmp_path):
    return str(write_jsonl(tmp_path / "grpo.jsonl", grpo_rows()))


@pytest.fixture
def rows():
    """Row factories and a JSONL writer: ``rows.sft(n)``, ``rows.dpo(n)``, ``rows.grpo(n)``, ``rows.write(path, rs)``."""

    class Rows:
        sft = staticmethod(sft_rows)
        dpo = staticmethod(dpo_rows)
        grpo = staticmethod(grpo_rows)
        write = staticmethod(write_jsonl)

    return Rows


@pytest.fixture
def one_thread():
    """One torch thread for the test: batched and one-by-one (or cached and re-prefilled)
    computations compared in the same reduction order; the process's setting is put back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
