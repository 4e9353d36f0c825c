"""FSDP2 (``fully_shard``) on CPU processes (gloo): the recipes' forward + fused SFT loss work on
sharded parameters and give the single-process gradients.

accelerate only switches to FSDP on accelerator devices, so on a CPU machine this drives
``fully_shard`` directly; what it checks is that the structure the recipes rely on (hidden states
from the wrapped backbone, the LM head applied by the loss, gradients formed in forward) is
FSDP-safe.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agenttrainer.data import pack, sft_conversation, tokenize_conversation
from agenttrainer.losses import sft_loss
from agenttrainer.models import build_tiny_model
from agenttrainer.models.attention import HiddenStates

pytestmark = pytest.mark.long  # two gloo processes, each importing torch

TORCHRUN = Path(sys.executable).parent / "torchrun"
HERE = Path(__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def examples():
    _, tok = build_tiny_model(seed=0)
    rows = [
        {"instruction": f"task {i}: fix the failing test in module_{i}.py", "response": "Action: run_tests" * (i + 1)}
        for i in range(4)
    ]
    return [tokenize_conversation(tok, sft_conversation(r, f"rows:{i + 1}")) for i, r in enumerate(rows)]


def test_fsdp2_two_cpu_processes_give_single_process_gradients(tmp_path):
    out = tmp_path / "grads.pt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [
            str(TORCHRUN),
            "--nproc_per_node",
            "2",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(_free_port()),
            str(HERE / "fsdp_grads_worker.py"),
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    sharded = torch.load(out)

    model, _ = build_tiny_model(seed=0)
    module = HiddenStates(model)
    data = examples()
    batch = pack(data)
    hidden = module(batch["input_ids"], batch["position_ids"], batch["seq_ids"])
    weight, bias = module.lm_head()
    loss, _ = sft_loss(hidden, weight, batch["labels"], lm_head_bias=bias)
    loss.backward()
    reference = {n: p.grad for n, p in module.named_parameters()}
    assert sharded.keys() == reference.keys()
    for name, grad in reference.items():
        torch.testing.assert_close(sharded[name], grad, atol=1e-5, rtol=1e-4, msg=name)
