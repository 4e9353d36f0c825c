"""`make demo`'s scripts run start to finish (slow tier: they train SmolLM2 for real)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_reduced_demo_trained_model_beats_the_base_model(tmp_path):
    """The demo's training recipe, evaluated on fewer tasks (30 test, 6 test-unseen)."""
    command = [sys.executable, str(EXAMPLES / "demo.py"), "--workdir", str(tmp_path),
               "--test-tasks", "30", "--unseen-tasks", "6", "--rl-iterations", "2", "--rl-tasks", "4"]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    stages = {(s["name"], s["split"]): s for s in report["stages"]}
    assert set(stages) == {(n, s) for n in ("base", "sft", "rl") for s in ("test", "test-unseen")}
    # the online RL stage ran in the live environment and is reported next to base and SFT
    assert report["online_rl_iterations"] == 2 and report["online_rl_masked_episodes"] == 0
    assert len(report["curves"]["rl/train_reward"]) == 2
    assert any((c["a"], c["b"]) == ("sft", "rl") for c in report["comparisons"])
    rollout = json.loads((tmp_path / "rl" / "rollouts" / "iteration-00001.jsonl").read_text().splitlines()[0])
    assert rollout["steps"][0]["token_ids"] and rollout["metadata"]["prompt_token_ids"]
    assert stages["sft", "test"]["n"] == 30
    assert stages["sft", "test"]["success_rate"] > stages["base", "test"]["success_rate"]
    comparison = next(c for c in report["comparisons"] if c["split"] == "test" and c["a"] == "base")
    assert (comparison["a"], comparison["b"], comparison["test"]) == ("base", "sft", "mcnemar")
    assert comparison["diff"] > 0 and comparison["p_value"] < 0.05
    for name in ("report.md", "report.html", "success.png", "sft.jsonl", "dpo.jsonl", "tasks/train.jsonl"):
        assert (tmp_path / name).is_file(), name


def test_online_loop_example(tmp_path):
    out = subprocess.run([sys.executable, str(EXAMPLES / "online_loop.py"), "--workdir", str(tmp_path),
                          "--sft-steps", "1"], capture_output=True, text=True, timeout=1800)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "expert  6 episodes" in out.stdout and "solved 6/6" in out.stdout
    assert (tmp_path / "sft" / "final").is_dir()
    rollout = json.loads((tmp_path / "trained_rollout.jsonl").read_text().splitlines()[0])
    assert rollout["agent"] == "sft-smollm2" and rollout["steps"]
