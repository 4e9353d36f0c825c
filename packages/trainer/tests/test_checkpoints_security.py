"""Resuming never unpickles code: every checkpoint file is loaded as tensors and plain values only.

A checkpoint directory may come from elsewhere (a download, a shared drive, an MCP client's
``resume_from_checkpoint``). A file in it that holds any other Python object is refused in one
line naming the file, before anything in it runs; a normal save -> resume still restores the
optimizer, the schedule and every RNG exactly.
"""

import pickle
import random
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from agenttrainer.checkpoints import load_checkpoint, save_checkpoint
from agenttrainer.cli import cli
from agenttrainer.config import SFTConfig
from agenttrainer.errors import CheckpointError
from agenttrainer.trainers.setup import make_accelerator, make_optimizer_and_scheduler
from agenttrainer.trainers.sft import SFTTrainer


class Hostile:
    """Unpickling this calls ``open(marker, "w")``: the file appearing means the checkpoint ran code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _sft_config(out, sft_file, **kw):
    base = dict(batch_size=2, max_optimizer_steps=2, save_steps=2, progress_bar=False, bf16=False, learning_rate=1e-2)
    return SFTConfig(train_file=sft_file, output_dir=str(out), **{**base, **kw})


@pytest.fixture
def checkpoint(tmp_path, tiny, sft_file):
    """A real checkpoint-2 of a two-step SFT run."""
    model, tok = tiny
    config = _sft_config(tmp_path / "out", sft_file)
    SFTTrainer(config, model=model, tokenizer=tok).train()
    path = Path(config.output_dir) / "checkpoint-2"
    assert (path / "optimizer.pt").is_file() and (path / "rng-0.pt").is_file()
    return path


def _plant(path, name, marker, how):
    """Replace ``path/name`` with a pickle whose loading would create ``marker``."""
    payload = {"state": {0: Hostile(marker)}, "param_groups": []}
    if how == "torch.save":
        torch.save(payload, path / name)
    else:  # a bare pickle, as an attacker would write it
        (path / name).write_bytes(pickle.dumps(payload, protocol=2))


HOSTILE_FILES = [
    ("optimizer.pt", "pickle"),
    ("optimizer.pt", "torch.save"),
    ("scheduler.pt", "pickle"),
    ("rng-0.pt", "torch.save"),
    ("rng-0.pt", "pickle"),
    ("trainable.pt", "torch.save"),
]


@pytest.mark.parametrize(("name", "how"), HOSTILE_FILES)
def test_security_a_checkpoint_file_holding_code_is_refused_and_never_run(
    tmp_path, tiny, sft_file, checkpoint, name, how
):
    marker = tmp_path / "pwned"
    _plant(checkpoint, name, marker, how)
    model, tok = tiny
    resumed = _sft_config(tmp_path / "out", sft_file, max_optimizer_steps=4, resume_from_checkpoint=str(checkpoint))
    with pytest.raises(CheckpointError) as caught:
        SFTTrainer(resumed, model=model, tokenizer=tok).train()
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{checkpoint / name}: refused")
    assert "could run code" in message
    assert not marker.exists()


def test_security_the_cli_refuses_a_hostile_checkpoint_in_one_line_with_exit_2(tmp_path, tiny_path, sft_file):
    out = tmp_path / "out"
    args = [
        "sft",
        "--model",
        tiny_path,
        "--train-file",
        sft_file,
        "--output-dir",
        str(out),
        "--batch-size",
        "2",
        "--save-steps",
        "2",
        "--no-bf16",
        "--no-progress-bar",
    ]
    first = CliRunner().invoke(cli, [*args, "--max-optimizer-steps", "2"])
    assert first.exit_code == 0, first.output
    marker = tmp_path / "pwned"
    _plant(out / "checkpoint-2", "optimizer.pt", marker, "pickle")
    resumed = CliRunner().invoke(cli, [*args, "--max-optimizer-steps", "4", "--resume-from-checkpoint", "latest"])
    assert resumed.exit_code == 2, resumed.output
    # one line, no traceback, no warning (transformers' model-loading bar aside)
    lines = [line for line in resumed.stderr.splitlines() if line.strip() and "Loading weights" not in line]
    assert len(lines) == 1 and lines[0].startswith(f"error: {out / 'checkpoint-2' / 'optimizer.pt'}: refused")
    assert not marker.exists()


def test_security_a_reference_cache_holding_code_is_refused_and_never_run(tmp_path, tiny, dpo_file):
    """DPO/GRPO read ``<output_dir>/ref_logps-*.pt`` on resume: the same rule as for checkpoints."""
    from agenttrainer.config import DPOConfig
    from agenttrainer.trainers.dpo import DPOTrainer

    marker = tmp_path / "pwned"
    out = tmp_path / "out"
    out.mkdir()
    torch.save({"key": Hostile(marker), "logps": torch.zeros(1)}, out / "ref_logps-train.pt")
    model, tok = tiny
    config = DPOConfig(
        train_file=dpo_file, output_dir=str(out), batch_size=2, max_optimizer_steps=1, progress_bar=False, bf16=False
    )
    with pytest.raises(CheckpointError, match=r"ref_logps-train\.pt: refused"):
        DPOTrainer(config, model=model, tokenizer=tok).train()
    assert not marker.exists()


def test_a_corrupt_checkpoint_file_is_named_in_one_line(tmp_path, tiny, sft_file, checkpoint):
    (checkpoint / "scheduler.pt").write_bytes(b"PK\x03\x04 truncated")
    model, tok = tiny
    resumed = _sft_config(tmp_path / "out", sft_file, max_optimizer_steps=4, resume_from_checkpoint=str(checkpoint))
    with pytest.raises(CheckpointError) as caught:
        SFTTrainer(resumed, model=model, tokenizer=tok).train()
    assert "\n" not in str(caught.value) and str(caught.value).startswith(f"{checkpoint / 'scheduler.pt'}: ")


def test_save_then_resume_restores_optimizer_schedule_and_every_rng_exactly(tmp_path):
    config = SFTConfig(
        train_file="unused",
        output_dir=str(tmp_path),
        bf16=False,
        lr_scheduler="cosine",
        warmup_ratio=0.25,
        learning_rate=1e-2,
    )
    acc = make_accelerator(config)

    def fresh():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
        optimizer, scheduler = make_optimizer_and_scheduler(model, config, total_steps=8)
        model, optimizer = acc.prepare(model, optimizer)
        return model, optimizer, scheduler

    model, optimizer, scheduler = fresh()
    for _ in range(3):
        model(torch.randn(5, 4)).pow(2).mean().backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    random.random()  # move the Python RNG away from its seeded start
    path = save_checkpoint(acc, model, optimizer, scheduler, config, {"global_step": 3})
    draws = (random.random(), random.gauss(0, 1), torch.rand(4))

    random.seed(123)
    torch.manual_seed(123)
    model2, optimizer2, scheduler2 = fresh()
    state = load_checkpoint(path, acc, model2, optimizer2, scheduler2)
    assert state == {"global_step": 3}
    assert (random.random(), random.gauss(0, 1)) == draws[:2]
    assert torch.equal(torch.rand(4), draws[2])
    assert scheduler2.state_dict() == scheduler.state_dict() and scheduler2.get_last_lr() == scheduler.get_last_lr()
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a, b)
    saved, loaded = optimizer.state_dict(), optimizer2.state_dict()
    assert saved["param_groups"] == loaded["param_groups"]
    for k, moments in saved["state"].items():
        for key, value in moments.items():
            assert torch.equal(value, loaded["state"][k][key]), (k, key)
