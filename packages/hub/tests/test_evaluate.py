import json

import pytest

from knowlyrcore import AgentEnv, InfrastructureError, TimeStep, read_trajectories, register, unregister
from knowlyrcore.actions import parse_action
from trajectoryhub import compare_agents, evaluate_agent
from trajectoryhub.cli import main


def run(agent, rewards, tasks=None):
    from knowlyrcore import Trajectory

    tasks = tasks or [f"t{i}" for i in range(len(rewards))]
    return [
        Trajectory.model_validate(
            {"id": f"{agent}{i}", "agent": agent, "task": {"id": task}, "outcome": {"success": r >= 0.5}, "reward": r}
        )
        for i, (r, task) in enumerate(zip(rewards, tasks))
    ]


def test_evaluate_agent_summary():
    report = evaluate_agent(run("a", [1.0, 0.0, 1.0, 1.0]))
    assert report.avg_reward == 0.75 and report.success_rate == 0.75 and report.episodes == 4
    assert report.reward_ci95[0] <= 0.75 <= report.reward_ci95[1]
    assert report.per_task == {"t0": 1.0, "t1": 0.0, "t2": 1.0, "t3": 1.0}


def test_welch_t_hand_derived():
    """a = [1, 2, 3], b = [4, 5, 6]: means 2 and 5, both sample variances 1, so
    t = (2 - 5) / sqrt(1/3 + 1/3) = -3.674; Welch df = (2/3)^2 / (2 * (1/3)^2 / 2) = 4,
    two-sided p = 2 * P(T_4 < -3.674) = 0.02131."""
    result = compare_agents({"a": run("a", [1, 2, 3]), "b": run("b", [4, 5, 6])})
    (c,) = result["comparisons"]
    assert c["diff"] == pytest.approx(-3.0)
    assert c["welch_p"] == pytest.approx(0.02131, abs=1e-4)
    assert c["paired_p"] == 0.0  # the same tasks, b always exactly 3 better: no variance in the differences


def test_bonferroni_and_leaderboard():
    strong = run("strong", [0.9, 0.95, 1.0, 0.92, 0.97, 0.93, 0.99, 0.96])
    weak = run("weak", [0.1, 0.2, 0.05, 0.15, 0.1, 0.12, 0.2, 0.08])
    mid = run("mid", [0.12, 0.18, 0.1, 0.14, 0.11, 0.13, 0.19, 0.07])
    result = compare_agents({"weak": weak, "strong": strong, "mid": mid})
    assert [row["agent"] for row in result["leaderboard"]] == ["strong", "mid", "weak"]
    assert result["leaderboard"][0]["beats_next"] and not result["leaderboard"][1]["beats_next"]
    for c in result["comparisons"]:
        assert c["welch_p_bonferroni"] == pytest.approx(min(1.0, 3 * c["welch_p"]))


def test_identical_agents_are_not_significant():
    result = compare_agents({"a": run("a", [0.5, 0.5]), "b": run("b", [0.5, 0.5])})
    assert result["comparisons"][0]["welch_p"] == 1.0 and not result["comparisons"][0]["significant"]


def test_deterministic_agents_with_different_rewards_differ_surely():
    result = compare_agents({"a": run("a", [0.9, 0.9, 0.9]), "b": run("b", [0.5, 0.5, 0.5])})
    (c,) = result["comparisons"]
    assert c["welch_p"] == 0.0 and c["significant"]


def test_errors():
    with pytest.raises(ValueError, match="at least two"):
        compare_agents({"a": run("a", [1.0])})
    with pytest.raises(ValueError, match="no trajectories"):
        evaluate_agent([])


# --- an environment that raises on the policy's action ends that episode, not the evaluation ---

FRAGILE_ENV = "hubtest/fragile-v0"


class FragileEnv(AgentEnv):
    """``divide`` by the action's ``by`` (0 raises ZeroDivisionError out of step; a string, the
    InfrastructureError of a backend that died); ``respond`` ends the episode as a success."""

    domain = "hubtest"

    def reset(self, *, task=None, seed=None):
        return TimeStep("divide something, then respond")

    def step(self, action):
        tool, params = parse_action(action)
        if tool == "divide" and isinstance(params["by"], str):
            raise InfrastructureError(params["by"])
        if tool == "divide":
            return TimeStep(f"{10 / params['by']:g}", reward=0.5)
        return TimeStep("bye", reward=1.0, terminated=True, info={"success": True})

    @property
    def available_tools(self):
        return ["divide", "respond"]


def fragile_task(tid, by):
    return {
        "id": tid,
        "description": f"divide by {by}",
        "domain": "hubtest",
        "metadata": {"solution": [{"tool": "divide", "params": {"by": by}}, {"tool": "respond", "params": {}}]},
    }


def test_cli_evaluate_records_an_episode_whose_env_raised_and_goes_on(tmp_path, capsys):
    """Before: the ZeroDivisionError of t1 ended `knowlyr-hub evaluate` with nothing written. The
    expert replays each task's solution; t1's divides by zero, its batch-mates go on stepping."""
    tasks, out, report_dir = tmp_path / "tasks.jsonl", tmp_path / "run.jsonl", tmp_path / "report"
    tasks.write_text("".join(json.dumps(fragile_task(tid, by)) + "\n" for tid, by in [("t0", 2), ("t1", 0), ("t2", 5)]))
    register(FRAGILE_ENV, FragileEnv)
    try:
        code = main(
            [
                "evaluate",
                "--policy",
                "expert",
                "--tasks",
                str(tasks),
                "--env",
                FRAGILE_ENV,
                "-o",
                str(out),
                "--report-dir",
                str(report_dir),
                "--batch-size",
                "3",
            ]
        )
    finally:
        unregister(FRAGILE_ENV)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "1 episode(s) ended because the environment raised on the policy's action" in err
    runs = list(read_trajectories(out))
    assert [t.task.id for t in runs] == ["t0", "t1", "t2"]
    assert [t.outcome.success for t in runs] == [True, False, True]
    broken = runs[1]
    assert broken.outcome.exit_status == "env_error" and broken.reward == 0.0
    assert broken.metadata["env_error"] == "ZeroDivisionError: division by zero"
    assert broken.tool_names == ["divide"] and "ZeroDivisionError" in broken.steps[-1].observation.error
    (stage,) = json.loads((report_dir / "report.json").read_text())["stages"]
    assert stage["n"] == 3 and stage["success_rate"] == pytest.approx(2 / 3) and stage["env_errors"] == 1
    assert stage["mean_reward"] == pytest.approx((1.5 + 0.0 + 1.5) / 3)


def test_evaluate_policy_counts_env_errors_and_infrastructure_failures():
    from trajectoryhub.evaluate import ExpertReplay, evaluate_policy

    tasks = [fragile_task("t0", 0), fragile_task("t1", 4), fragile_task("t2", "sandbox died\nmore detail")]
    summary, runs = evaluate_policy(ExpertReplay, tasks, env=FragileEnv, batch_size=2, progress=False)
    assert [t.outcome.exit_status for t in runs] == ["env_error", "terminated", "infrastructure_failure"]
    assert runs[2].metadata["infrastructure_failure"] == "InfrastructureError: sandbox died"
    assert (summary["env_errors"], summary["infrastructure_failures"]) == (1, 1)
    assert summary["success_rate"] == pytest.approx(1 / 3) and summary["mean_reward"] == pytest.approx(1.5 / 3)
