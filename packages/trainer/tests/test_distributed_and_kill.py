"""Subprocess runs: 2 CPU processes (gloo, launched with the shipped DDP config) vs 1, and SIGKILL
after a checkpoint then resume.

Each compares final weights with an uninterrupted / single-process run of the same global batch,
which trains in the background meanwhile.
"""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

# Each test starts 3-4 interpreters that import torch and train: ~2 minutes for the file.
pytestmark = pytest.mark.long

ACCELERATE = Path(sys.executable).parent / "accelerate"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "offline"}


def _write_config(path, **fields):
    path.write_text(yaml.safe_dump(fields))
    return str(path)


def _weights(output_dir):
    return load_file(str(Path(output_dir) / "final" / "model.safetensors"))


def _assert_weights_close(a, b, atol):
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=0, msg=name)


def _common(tiny_path, train_file):
    return dict(
        model_name_or_path=tiny_path,
        train_file=train_file,
        num_epochs=2,
        learning_rate=1e-3,
        bf16=False,
        progress_bar=False,
        warmup_ratio=0.0,
        seed=3,
    )


@contextlib.contextmanager
def _training_meanwhile(method, config, log_path):
    """Train 1 process on ``config`` in the background while the block runs; it must succeed.

    The reference run a test compares with needs nothing from the runs the test launches, so it
    trains at the same time instead of before them (most of a run is starting Python and torch).
    """
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agenttrainer.cli", method, "--config", config],
            env=_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    assert proc.wait(timeout=300) == 0, Path(log_path).read_text()[-3000:]


#: What docs/scale.md tells GPU users to launch with.
DDP_CONFIG = Path(__file__).resolve().parents[3] / "examples" / "accelerate" / "ddp.yaml"


@pytest.mark.parametrize("method", ["sft", "dpo", "grpo"])
def test_the_shipped_ddp_config_trains_two_processes_to_the_weights_of_one(
    tmp_path, tiny_path, sft_file, dpo_file, grpo_file, method
):
    """examples/accelerate/ddp.yaml starts 2 processes that train in lockstep (on this CPU machine
    gloo processes, with mixed precision off) and end at batch 2 each with the weights of 1
    process at batch 4."""
    train_file = {"sft": sft_file, "dpo": dpo_file, "grpo": grpo_file}[method]
    one = _write_config(
        tmp_path / "one.yaml", **_common(tiny_path, train_file), batch_size=4, output_dir=str(tmp_path / "one")
    )
    two = _write_config(
        tmp_path / "two.yaml", **_common(tiny_path, train_file), batch_size=2, output_dir=str(tmp_path / "two")
    )
    launch = [
        str(ACCELERATE),
        "launch",
        "--config_file",
        str(DDP_CONFIG),
        "--mixed_precision",
        "no",
        "--main_process_port",
        str(_free_port()),
        "-m",
        "agenttrainer.cli",
        method,
        "--config",
        two,
    ]
    with _training_meanwhile(method, one, tmp_path / "one.log"):
        proc = subprocess.run(launch, env=_env(), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.count('"global_step": 4') == 1  # 2 steps per epoch x 2 epochs, printed by rank 0 only
    _assert_weights_close(_weights(tmp_path / "one"), _weights(tmp_path / "two"), atol=1e-5)


def test_sigkill_after_checkpoint_then_resume_matches_uninterrupted(tmp_path, tiny_path, rows):
    train_file = str(rows.write(tmp_path / "sft.jsonl", rows.sft(48, seed=5)))
    fields = {**_common(tiny_path, train_file), "batch_size": 2, "num_epochs": 2, "save_steps": 4}
    full = _write_config(tmp_path / "full.yaml", **fields, output_dir=str(tmp_path / "full"))
    out = tmp_path / "killed"
    killed = _write_config(tmp_path / "killed.yaml", **fields, output_dir=str(out))
    with _training_meanwhile("sft", full, tmp_path / "full.log"):  # the uninterrupted run
        proc = subprocess.Popen(
            [sys.executable, "-m", "agenttrainer.cli", "sft", "--config", killed],
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 240
        while not (out / "checkpoint-8").is_dir() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, "training finished before it could be killed"
        assert not (out / "final").exists()

        resume = subprocess.run(
            [sys.executable, "-m", "agenttrainer.cli", "sft", "--config", killed, "--resume-from-checkpoint", "latest"],
            env=_env(),
            capture_output=True,
            text=True,
        )
        assert resume.returncode == 0, resume.stderr[-3000:]
        assert '"global_step": 48' in resume.stdout
    _assert_weights_close(_weights(tmp_path / "full"), _weights(out), atol=0)
