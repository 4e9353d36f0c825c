"""`make demo`'s script runs start to finish (slow tier: it trains SmolLM2 for real)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEMO = Path(__file__).resolve().parents[2] / "examples" / "online_loop.py"


def test_online_loop_demo(tmp_path):
    out = subprocess.run([sys.executable, str(DEMO), "--workdir", str(tmp_path), "--sft-steps", "1"],
                         capture_output=True, text=True, timeout=1800)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "expert  6 episodes" in out.stdout and "solved 6/6" in out.stdout
    assert (tmp_path / "sft" / "final").is_dir()
    rollout = json.loads((tmp_path / "trained_rollout.jsonl").read_text().splitlines()[0])
    assert rollout["agent"] == "sft-smollm2" and rollout["steps"]
