"""Evaluate an agent and compare agents with proper statistics (scipy.stats).

``evaluate_agent`` summarises one agent's trajectories: success rate, mean reward with a
bootstrap 95% confidence interval, mean steps. ``compare_agents`` tests every pair of agents
on reward: Welch's t-test and the Mann-Whitney U test on all episodes, and a paired t-test
on the per-task means of the tasks both attempted; p-values are Bonferroni-corrected for the
number of pairs. ``leaderboard`` ranks by mean reward and marks an agent whose lead over the
next one is significant.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
from scipy import stats

from knowlyrcore import Trajectory
from trajectoryhub.export import trajectory_reward


@dataclass
class AgentReport:
    agent: str
    episodes: int
    success_rate: float | None
    avg_reward: float
    reward_ci95: tuple[float, float]
    avg_steps: float
    per_task: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rewards(trajectories: list[Trajectory]) -> list[float]:
    values = [trajectory_reward(t) for t in trajectories]
    if any(v is None for v in values):
        missing = sum(v is None for v in values)
        raise ValueError(f"{missing} trajectories have no reward, score or success: score them first")
    return [float(v) for v in values]  # type: ignore[arg-type]


def evaluate_agent(trajectories: list[Trajectory], *, agent: str | None = None, seed: int = 0) -> AgentReport:
    """Summary statistics of one agent's episodes."""
    if not trajectories:
        raise ValueError("no trajectories to evaluate")
    rewards = _rewards(trajectories)
    judged = [t.outcome.success for t in trajectories if t.outcome.success is not None]
    if len(set(rewards)) > 1:
        ci = stats.bootstrap((np.array(rewards),), np.mean, confidence_level=0.95, n_resamples=2000,
                             random_state=np.random.default_rng(seed)).confidence_interval  # fmt: skip
        interval = (float(ci.low), float(ci.high))
    else:
        interval = (rewards[0], rewards[0])
    per_task: dict[str, list[float]] = defaultdict(list)
    for t, r in zip(trajectories, rewards):
        per_task[t.task.id or "?"].append(r)
    return AgentReport(
        agent=agent or trajectories[0].agent or "agent",
        episodes=len(trajectories),
        success_rate=sum(judged) / len(judged) if judged else None,
        avg_reward=float(np.mean(rewards)),
        reward_ci95=interval,
        avg_steps=float(np.mean([len(t.steps) for t in trajectories])),
        per_task={k: float(np.mean(v)) for k, v in sorted(per_task.items())},
    )


def _p(value: float) -> float:
    return 1.0 if np.isnan(value) else float(value)


def compare_agents(runs: dict[str, list[Trajectory]], *, alpha: float = 0.05) -> dict[str, Any]:
    """Pairwise significance tests between agents; returns reports, comparisons and a leaderboard."""
    if len(runs) < 2:
        raise ValueError("compare_agents needs at least two agents")
    reports = {name: evaluate_agent(ts, agent=name) for name, ts in runs.items()}
    rewards = {name: _rewards(ts) for name, ts in runs.items()}
    pairs = list(combinations(runs, 2))
    comparisons = []
    for a, b in pairs:
        ra, rb = rewards[a], rewards[b]
        row: dict[str, Any] = {"a": a, "b": b, "diff": float(np.mean(ra) - np.mean(rb))}
        if len(ra) < 2 or len(rb) < 2:
            row["welch_p"] = row["mannwhitney_p"] = 1.0  # too few episodes to test anything
        elif np.ptp(ra) < 1e-12 and np.ptp(rb) < 1e-12:
            # both agents are deterministic: the t statistic is undefined, the difference is certain
            row["welch_p"] = row["mannwhitney_p"] = 1.0 if np.mean(ra) == np.mean(rb) else 0.0
        else:
            row["welch_p"] = _p(stats.ttest_ind(ra, rb, equal_var=False).pvalue)
            row["mannwhitney_p"] = _p(stats.mannwhitneyu(ra, rb, alternative="two-sided").pvalue)
        shared = sorted(set(reports[a].per_task) & set(reports[b].per_task))
        if len(shared) >= 2:
            xa = [reports[a].per_task[k] for k in shared]
            xb = [reports[b].per_task[k] for k in shared]
            differences = np.subtract(xa, xb)
            if np.ptp(differences) < 1e-12:  # a constant difference: no variance to test against
                row["paired_p"] = 1.0 if abs(differences[0]) < 1e-12 else 0.0
            else:
                row["paired_p"] = _p(stats.ttest_rel(xa, xb).pvalue)
            row["shared_tasks"] = len(shared)
        for key in ("welch_p", "mannwhitney_p", "paired_p"):
            if key in row:
                row[key + "_bonferroni"] = min(1.0, row[key] * len(pairs))
        row["significant"] = row["welch_p_bonferroni"] < alpha
        comparisons.append(row)
    return {"reports": {k: v.to_dict() for k, v in reports.items()}, "comparisons": comparisons,
            "leaderboard": leaderboard(reports, comparisons)}  # fmt: skip


def leaderboard(reports: dict[str, AgentReport], comparisons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Agents by mean reward; ``beats_next`` when the lead over the next agent is significant."""
    order = sorted(reports.values(), key=lambda r: r.avg_reward, reverse=True)
    significant = {frozenset((c["a"], c["b"])): c["significant"] for c in comparisons}
    rows = []
    for rank, report in enumerate(order, start=1):
        nxt = order[rank] if rank < len(order) else None
        rows.append({"rank": rank, "agent": report.agent, "avg_reward": report.avg_reward,
                     "success_rate": report.success_rate, "episodes": report.episodes,
                     "beats_next": bool(nxt and significant.get(frozenset((report.agent, nxt.agent))))})  # fmt: skip
    return rows
