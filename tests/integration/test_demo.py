"""`make demo`'s scripts run start to finish (slow tier: they train SmolLM2 for real)."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_reduced_demo_trained_model_beats_the_base_model(tmp_path):
    """The demo's recipe on fewer tasks (30 test, 6 test-verifier-only, 6 test-unseen) and one
    iteration of each arm; the command the report gives for the SFT figure, run as a user would,
    gives the same figure."""
    command = [
        sys.executable,
        str(EXAMPLES / "demo.py"),
        "--workdir",
        str(tmp_path),
        "--train-tasks",
        "160",
        "--test-tasks",
        "30",
        "--verifier-tasks",
        "6",
        "--unseen-tasks",
        "6",
        "--rl-iterations",
        "1",
        "--rl-tasks-per-iteration",
        "2",
        "--eval-samples",
        "2",
        "--pass-k",
        "2",
        "--pass-k-tasks",
        "3",
    ]
    out = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    stages = {(s["name"], s["split"]): s for s in report["stages"]}
    splits = ("test", "test-verifier-only", "test-unseen")
    assert set(stages) == {(n, s) for n in ("base", "sft", "sft-more", "rft", "rl") for s in splits}
    # the headline is RL against SFT on the templates no demonstration showed
    assert (report["comparisons"][0]["a"], report["comparisons"][0]["b"]) == ("sft", "rl")
    assert (
        report["comparisons"][0]["split"] == "test-verifier-only" and report["rl_pool_split"] == "train-verifier-only"
    )
    assert {r["template"] for r in report["sft_on_rl_pool"]["per_template"]} <= set(report["roles"]["verifier_only"])
    # RFT and RL ran in the live environment and are reported next to base and SFT
    assert report["rl_iterations"] == 1 and report["rl_masked_episodes"] == 0 and report["rft_iterations"] == 1
    assert len(report["curves"]["rl/train_reward"]) == 1
    assert {(c["a"], c["b"]) for c in report["comparisons"]} >= {("sft", "rl"), ("sft", "rft"), ("rft", "rl")}
    rollout = json.loads((tmp_path / "rl" / "rollouts" / "iteration-00001.jsonl").read_text().splitlines()[0])
    assert rollout["steps"][0]["token_ids"] and rollout["metadata"]["prompt_token_ids"]
    assert stages["sft", "test"]["n"] == 30
    assert stages["sft", "test"]["success_rate"] > stages["base", "test"]["success_rate"]
    comparison = next(c for c in report["comparisons"] if c["split"] == "test" and c["a"] == "base")
    assert (comparison["a"], comparison["b"], comparison["test"]) == ("base", "sft", "mcnemar")
    assert comparison["diff"] > 0 and comparison["p_value"] < 0.05
    # sampled evaluation, per-template table, and what each stage cost
    assert [s["name"] for s in report["sampled"]] == ["sft", "sft-more", "rft", "rl"] and report["sampled"][0]["k"] == 2
    assert {row["stage"] for row in report["pipeline"]} >= {
        "train sft",
        "train sft-more",
        "train rft",
        "train rl",
        "evaluate sft",
    }
    assert all(row["peak_rss_mb"] > 100 for row in report["pipeline"])
    titles = [t["title"] for t in report["tables"]]
    assert titles[0].startswith("Greedy success by template role") and titles[1].startswith("Before RL")
    assert "Greedy success per task template" in titles
    assert any(t.startswith("Sampled") for t in titles)
    for name in ("report.md", "report.html", "success.png", "sft.jsonl", "dpo.jsonl", "tasks/train.jsonl"):
        assert (tmp_path / name).is_file(), name

    # the report's command for the SFT figure on test, typed by a user, gives that figure
    argv = shlex.split(stages["sft", "test"]["command"])
    assert argv[0] == "knowlyr-hub"
    again = subprocess.run(
        [str(Path(sys.executable).parent / "knowlyr-hub"), *argv[1:]], capture_output=True, text=True, timeout=1800
    )
    assert again.returncode == 0, again.stderr[-3000:]
    row = next(line.split() for line in again.stdout.splitlines() if line.startswith("sft "))
    assert row[3] == f"{stages['sft', 'test']['success_rate']:.1%}"


def test_online_loop_example(tmp_path):
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "online_loop.py"), "--workdir", str(tmp_path), "--sft-steps", "1"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "expert  6 episodes" in out.stdout and "solved 6/6" in out.stdout
    assert (tmp_path / "sft" / "final").is_dir()
    rollout = json.loads((tmp_path / "trained_rollout.jsonl").read_text().splitlines()[0])
    assert rollout["agent"] == "sft-smollm2" and rollout["steps"]
