"""The small online-RL config the trainer's tests start from: a few tokens, float32, no progress
bar, no process reward, a learning rate a tiny model moves with. Each test file overrides what its
tests are about (the env, group sizes, episode lengths)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agenttrainer.config import OnlineRLConfig


def small_online_config(tmp_path: Path, tasks_file: str | Path, **overrides: Any) -> OnlineRLConfig:
    values = {
        "model_name_or_path": "unused",
        "env_id": "unused/env",
        "tasks_file": str(tasks_file),
        "output_dir": str(tmp_path / "out"),
        "learning_rate": 1e-2,
        "warmup_ratio": 0.0,
        "bf16": False,
        "progress_bar": False,
        "process_reward": "none",
    }
    return OnlineRLConfig.from_dict({**values, **overrides})
