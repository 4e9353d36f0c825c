import pytest

from trajectoryhub import compare_agents, evaluate_agent


def run(agent, rewards, tasks=None):
    from knowlyrcore import Trajectory

    tasks = tasks or [f"t{i}" for i in range(len(rewards))]
    return [Trajectory.model_validate({"id": f"{agent}{i}", "agent": agent, "task": {"id": task},
                                       "outcome": {"success": r >= 0.5}, "reward": r})
            for i, (r, task) in enumerate(zip(rewards, tasks))]  # fmt: skip


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
