"""Seed 003's reward names: ``AgentRewardConfig`` (changeable weights) and ``compute_reward``."""

import pytest

from agentreward import DEFAULT_PENALTIES, RewardEngine, RewardError
from agentreward.presets import SEED_003_WEIGHTS, seed003_weights
from agentreward.seed003 import AgentRewardConfig, AgentRewardModel, Seed003Engine

# Seed 003's AgentRewardConfig, as written there (weights and penalties).
SEED_WEIGHTS = {
    "task_completion": 0.4,
    "tool_accuracy": 0.25,
    "efficiency": 0.15,
    "timing_quality": 0.10,
    "format_compliance": 0.10,
}
SEED_PENALTIES = {"wrong_tool": -0.3, "redundant_call": -0.2, "format_error": -0.1, "timeout": -0.5}


def trajectory(success=True, repeats=1):
    """Two target tools; the lookup is made ``repeats`` times (exact repeats are redundant calls)."""
    lookup = {"tool_call": {"name": "get_order", "parameters": {"order_id": "#W1"}}, "observation": {"output": "ok"}}
    cancel = {
        "tool_call": {"name": "cancel_order", "parameters": {"order_id": "#W1"}},
        "observation": {"output": "done"},
    }
    return {
        "task": {"description": "cancel #W1", "metadata": {"target_tools": ["get_order", "cancel_order"]}},
        "steps": [lookup] * repeats + [cancel],
        "outcome": {"success": success},
    }


def test_defaults_are_the_seed_config():
    config = AgentRewardConfig()
    assert config.weights == SEED_WEIGHTS and config.penalties == SEED_PENALTIES == DEFAULT_PENALTIES


def test_default_weights_give_the_engine_preset_total():
    traj = trajectory(repeats=2)
    assert (
        AgentRewardConfig().compute_reward(traj)["total"]
        == RewardEngine(preset="seed-003").score_record(traj)["reward"]
    )


def test_compute_reward_total_breakdown_feedback_by_hand():
    """Steps: get_order, get_order (an exact repeat), cancel_order; targets get_order, cancel_order.

    task_completion 1 (success); tool F1: used {get_order x2, cancel_order} vs target, precision
    2/3, recall 1 -> 0.8; efficiency min(1, 2 targets / 3 steps) = 2/3; timing 1; format 1.
    total = 0.4 + 0.25*0.8 + 0.15*2/3 + 0.1 + 0.1 - 0.2*1/3 (one redundant call over 3 steps)
          = 0.9 - 0.0666667 = 0.833333.
    """
    result = AgentRewardConfig().compute_reward(trajectory(repeats=2))
    assert set(result) == {"total", "breakdown", "feedback"}
    assert result["breakdown"]["tool_accuracy"] == pytest.approx(0.8)
    assert result["breakdown"]["efficiency"] == pytest.approx(2 / 3, abs=1e-6)
    assert result["breakdown"]["penalty/redundant_call"] == pytest.approx(-0.2 / 3, abs=1e-6)
    assert result["total"] == pytest.approx(0.833333, abs=1e-6)
    assert "efficiency 0.67" in result["feedback"] and "penalty/redundant_call -0.07" in result["feedback"]


def test_weights_can_be_changed():
    """Only completion counts: a failed run scores 0 whatever its tools; only efficiency: 2/3 - 0.2/3."""
    failed = trajectory(success=False, repeats=2)
    assert AgentRewardConfig(weights={"task_completion": 1.0}).compute_reward(failed)["total"] == 0.0
    only_efficiency = AgentRewardConfig(weights={"efficiency": 1.0}).compute_reward(failed)["total"]
    assert only_efficiency == pytest.approx(2 / 3 - 0.2 / 3, abs=1e-6)
    engine = Seed003Engine(dimension_weights={"timing_quality": 1.0})  # seed names work on the engine too
    assert engine.score_record(failed)["reward"] == pytest.approx(1 - 0.2 / 3, abs=1e-6)


def test_penalties_can_be_changed():
    traj = trajectory(repeats=2)
    no_penalty = AgentRewardConfig(penalties={}).compute_reward(traj)
    assert no_penalty["total"] == pytest.approx(0.9) and "penalty/redundant_call" not in no_penalty["breakdown"]


@pytest.mark.parametrize(
    ("weights", "match"),
    [
        ({"speed": 1.0}, "unknown seed-003 reward dimension 'speed'"),
        ({"efficiency": -1}, ">= 0"),
        ({"efficiency": float("nan")}, "finite"),
        ({"efficiency": 0.0}, "positive sum"),
    ],
)
def test_bad_weights_are_refused(weights, match):
    with pytest.raises(RewardError, match=match):
        AgentRewardConfig(weights=weights)


def test_seed003_weights_defaults_and_aliases():
    assert seed003_weights() == SEED_003_WEIGHTS
    assert seed003_weights({"format_compliance": 2})["format"] == 2.0


def test_reward_model_from_query_response_and_trace():
    model = AgentRewardModel(AgentRewardConfig())
    trace = [{"tool": "get_order", "params": {"order_id": "#W1"}, "output": '{"status": "delivered"}'}]
    right = model.compute_reward(
        "status of #W1?", "It is delivered.", {"target_tools": ["get_order"], "answer": "delivered"}, trace
    )
    wrong = model.compute_reward(
        "status of #W1?", "It is pending.", {"target_tools": ["get_order"], "answer": "delivered"}, trace
    )
    assert right["breakdown"]["task_completion"] == 1.0 and wrong["breakdown"]["task_completion"] == 0.0
    assert right["total"] - wrong["total"] == pytest.approx(0.4)
    # as seed 003's preference-pair generation calls it: no ground truth, no trace
    online = model.compute_reward(query="hi", response="hello", ground_truth={}, execution_trace=[])
    assert 0.0 <= online["total"] <= 1.0 and set(online["breakdown"]) >= set(SEED_WEIGHTS)


@pytest.mark.parametrize("module", ["agentreward.seed003", "agentreward.presets"])
def test_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


def test_the_engine_and_the_cli_take_seed003_weights(tmp_path, capsys):
    """``RewardEngine(preset="seed-003", dimension_weights=...)`` and ``knowlyr-reward score
    --dimension-weights`` give the same changed total; other presets refuse the option."""
    import json

    from agentreward.cli import main

    failed = trajectory(success=False, repeats=2)
    engine = RewardEngine(preset="seed-003", dimension_weights={"efficiency": 1.0})
    assert engine.score_record(failed)["reward"] == pytest.approx(2 / 3 - 0.2 / 3, abs=1e-6)
    assert RewardEngine(preset="seed-003").score_record(failed)["reward"] != engine.score_record(failed)["reward"]
    with pytest.raises(ValueError, match="seed-003"):
        RewardEngine(dimension_weights={"efficiency": 1.0})
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(json.dumps(failed) + "\n")
    argv = ["score", str(source), "-o", str(out), "--preset", "seed-003", "--dimension-weights", '{"efficiency": 1}']
    assert main(argv) == 0
    assert json.loads(out.read_text())["reward"] == pytest.approx(2 / 3 - 0.2 / 3, abs=1e-6)
    assert main(["score", str(source), "-o", str(out), "--dimension-weights", '{"efficiency": 1}']) == 2
    assert "add --preset seed-003" in capsys.readouterr().err
