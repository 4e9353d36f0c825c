"""Evaluate agents and training stages with proper statistics (scipy.stats).

Stages (a policy run on a task split, as in seed 003's Stage 4):

* ``evaluate_policy`` runs a policy on tasks with ``collect_batched`` and summarises the run
  with ``summarize_stage``: success rate with its Wilson 95% interval, mean reward, and the
  seed's metrics, each as ``{"mean", "std", "count"}``:

  - ``tool_selection_accuracy``: F1 of the agent's tool calls against the expert's
    (``task.metadata["solution"]``) as multisets: precision = matched calls / agent calls,
    recall = matched calls / expert calls. Multisets rather than sets, so calling the right
    tool ten times is not as good as calling it once. Episodes without a solution are left
    out (``count`` says how many were scored).
  - ``plan_success_rate``: 1 when the expert's tools appear in the agent's calls in the
    expert's order (a subsequence: extra calls in between are allowed), else 0.
  - ``step_efficiency``: expert steps / agent steps, capped at 1, over successful episodes.
  - ``timing``: seconds per episode, the sum of the recorded step durations.
  - ``end_to_end_success``: 1 for an episode whose outcome says success, else 0 (an episode
    nobody judged did not succeed).

  An episode whose environment raised on the policy's action does not stop the run: it is
  recorded as failed with reward 0 (``outcome.exit_status`` and ``metadata.env_error`` say
  why; ``trajectoryhub.rollout.env_error_trajectory``), counts as a failure and is counted
  in the summary's ``env_errors``; one that raised an ``InfrastructureError``, or whose Ray
  workers kept dying, likewise under ``infrastructure_failure(s)``.
* ``evaluate_sampled`` plays every task ``k`` times and ``summarize_samples`` summarises ``k`` sampled episodes per task (temperature > 0): pass@1
  (mean per-task success rate) and pass@k (the unbiased estimator ``1 - C(n-c, k) / C(n, k)``
  per task, averaged), with the per-task rates; ``compare_sampled`` tests two stages' per-task
  rates with the Wilcoxon signed-rank test (and the paired t-test), a paired test that uses every
  sample instead of one greedy bit per task.
* ``template_table`` breaks success down by task template and split (seen templates and
  held-out ones side by side), one column per stage.
* ``compare_stages`` pairs the runs of every two stages by task id and tests the success
  difference with the exact McNemar test and the reward difference with the paired t-test and
  the Wilcoxon signed-rank test, Bonferroni-corrected over all pairs.

Agents (recorded trajectories): ``evaluate_agent`` gives success rate, mean reward with a
bootstrap 95% CI and mean steps; ``compare_agents`` tests every pair on reward (Welch's t,
Mann-Whitney U, a paired t-test on shared tasks), Bonferroni-corrected; ``leaderboard`` ranks
by mean reward and marks an agent whose lead over the next one is significant.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations
from math import comb
from typing import Any

import numpy as np

from knowlyrcore import SolutionReplay, TaskInfo, Trajectory
from knowlyrcore.lazy import lazy_import
from trajectoryhub.export import trajectory_reward
from trajectoryhub.ray_executor import INFRASTRUCTURE_FAILURE
from trajectoryhub.rollout import ENV_ERROR
from trajectoryhub.stats import (
    bonferroni,
    mcnemar_exact,
    pair_by_task,
    paired_ttest,
    wilcoxon_signed_rank,
    wilson_interval,
)

stats = lazy_import("scipy.stats")  # loaded when a statistic is computed, not for every command


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
        ci = stats.bootstrap(
            (np.array(rewards),),
            np.mean,
            confidence_level=0.95,
            n_resamples=2000,
            random_state=np.random.default_rng(seed),
        ).confidence_interval
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
    return {
        "reports": {k: v.to_dict() for k, v in reports.items()},
        "comparisons": comparisons,
        "leaderboard": leaderboard(reports, comparisons),
    }


def leaderboard(reports: dict[str, AgentReport], comparisons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Agents by mean reward; ``beats_next`` when the lead over the next agent is significant."""
    order = sorted(reports.values(), key=lambda r: r.avg_reward, reverse=True)
    significant = {frozenset((c["a"], c["b"])): c["significant"] for c in comparisons}
    rows = []
    for rank, report in enumerate(order, start=1):
        nxt = order[rank] if rank < len(order) else None
        rows.append(
            {
                "rank": rank,
                "agent": report.agent,
                "avg_reward": report.avg_reward,
                "success_rate": report.success_rate,
                "episodes": report.episodes,
                "beats_next": bool(nxt and significant.get(frozenset((report.agent, nxt.agent)))),
            }
        )
    return rows


# --- stages: a policy on a task split (seed 003, Stage 4) ---------------------------------------

STAGE_METRICS = (
    "tool_selection_accuracy",
    "plan_success_rate",
    "step_efficiency",
    "timing_precision",
    "timing",
    "end_to_end_success",
)


def expert_tools(task: TaskInfo) -> list[str] | None:
    """The tools of the task's ground-truth solution (``metadata.solution``), in order, or None."""
    solution = task.metadata.get("solution")
    if not isinstance(solution, list):
        return None
    return [str(action["tool"]) for action in solution if isinstance(action, dict) and action.get("tool")]


def tool_selection_f1(agent: Sequence[str], expert: Sequence[str]) -> float:
    """F1 of two tool multisets (1.0 when both are empty)."""
    if not agent and not expert:
        return 1.0
    matched = sum((Counter(agent) & Counter(expert)).values())
    if matched == 0:
        return 0.0
    precision, recall = matched / len(agent), matched / len(expert)
    return 2 * precision * recall / (precision + recall)


def follows_plan(agent: Sequence[str], expert: Sequence[str]) -> bool:
    """Whether ``expert`` is a subsequence of ``agent`` (same order, gaps allowed)."""
    calls = iter(agent)
    return all(any(call == tool for call in calls) for tool in expert)


def timing_precision(agent: Sequence[str], expert: Sequence[str]) -> float | None:
    """Fraction of the agent's steps that chose the right moment to answer (seed 003's timing).

    The expert's last tool is its answer (``respond``, ``submit``, ...). Step ``i`` is well timed
    when the agent answers exactly where the expert does: it answers at ``i`` if and only if
    ``i`` is the expert's last step. Answering early (before gathering what the answer needs)
    and going on calling tools when it is time to answer both count against it. None when
    either side took no step.
    """
    if not agent or not expert:
        return None
    answer, last = expert[-1], len(expert) - 1
    return sum((tool == answer) == (i >= last) for i, tool in enumerate(agent)) / len(agent)


def episode_seconds(trajectory: Trajectory) -> float | None:
    """Seconds the episode took: the sum of its steps' durations, None when none was recorded."""
    durations = [s.duration_s for s in trajectory.steps if s.duration_s is not None]
    return float(sum(durations)) if durations else None


def succeeded(trajectory: Trajectory) -> bool:
    return trajectory.outcome.success is True


def episode_reward(trajectory: Trajectory) -> float:
    """The trajectory's reward (``trajectory_reward``); 0 for an episode that earned none."""
    value = trajectory_reward(trajectory)
    return 0.0 if value is None else float(value)


def _summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"mean": None, "std": None, "count": 0}
    return {"mean": float(np.mean(values)), "std": float(np.std(values)), "count": len(values)}


def stage_metrics(trajectories: Sequence[Trajectory]) -> dict[str, dict[str, Any]]:
    """Seed 003's evaluation metrics of a run, each ``{"mean", "std", "count"}`` (see module docs)."""
    values: dict[str, list[float]] = {m: [] for m in STAGE_METRICS}
    for t in trajectories:
        agent, expert = t.tool_names, expert_tools(t.task)
        if expert is not None:
            values["tool_selection_accuracy"].append(tool_selection_f1(agent, expert))
            values["plan_success_rate"].append(float(follows_plan(agent, expert)))
            timed = timing_precision(agent, expert)
            if timed is not None:
                values["timing_precision"].append(timed)
            if succeeded(t):
                values["step_efficiency"].append(min(1.0, len(expert) / len(agent)) if agent else 1.0)
        seconds = episode_seconds(t)
        if seconds is not None:
            values["timing"].append(seconds)
        values["end_to_end_success"].append(float(succeeded(t)))
    return {m: _summary(v) for m, v in values.items()}


def summarize_stage(trajectories: Sequence[Trajectory], *, name: str, split: str = "") -> dict[str, Any]:
    """``{"name", "split", "n", "success_rate", "ci95", "mean_reward", "env_errors",
    "infrastructure_failures", "metrics"}`` of one run (both kinds of failure count as failures)."""
    if not trajectories:
        raise ValueError(f"stage {name!r} has no trajectories to summarise")
    wins = sum(succeeded(t) for t in trajectories)
    n = len(trajectories)
    return {
        "name": name,
        "split": split,
        "n": n,
        "success_rate": wins / n,
        "ci95": list(wilson_interval(wins, n)),
        "mean_reward": float(np.mean([episode_reward(t) for t in trajectories])),
        "env_errors": sum(t.outcome.exit_status == ENV_ERROR for t in trajectories),
        "infrastructure_failures": sum(t.outcome.exit_status == INFRASTRUCTURE_FAILURE for t in trajectories),
        "metrics": stage_metrics(trajectories),
    }


def evaluate_policy(
    policy: Any,
    tasks: Sequence[TaskInfo | dict],
    *,
    env: str | Callable[..., Any],
    name: str = "policy",
    split: str = "",
    max_steps: int = 30,
    env_kwargs: dict[str, Any] | None = None,
    reward_fn: Callable | None = None,
    batch_size: int = 64,
    seed: int | None = None,
    model_name: str = "",
    progress: bool = True,
    executor: str = "batched",
    ray_address: str | None = None,
    concurrency: int = 2,
) -> tuple[dict[str, Any], list[Trajectory]]:
    """Run ``policy`` once on every task; return the stage summary and the trajectories.

    ``policy`` is a ``BatchPolicy`` or a factory of per-episode policies; ``env`` a registered
    environment id or a factory. ``executor="batched"`` plays the episodes in lockstep
    (``collect_batched``); ``"ray"`` runs them on ``concurrency`` Ray actors (``collect``), which
    needs a factory of per-episode policies (a batch policy holds one model in this process).
    Episode ``i`` is reset with ``seed + i`` either way. An environment that raises on an
    action ends that episode only, as a failure (see the module docs).
    """
    from knowlyrcore.policy import BatchPolicy
    from trajectoryhub.batched import collect_batched
    from trajectoryhub.rollout import collect

    if not tasks:
        raise ValueError("evaluate_policy needs at least one task")
    # what both executors are told alike
    episodes: dict[str, Any] = dict(
        max_steps=max_steps,
        reward_fn=reward_fn,
        agent_name=name,
        model_name=model_name,
        env_kwargs=env_kwargs,
        seed=seed,
        progress=progress,
        record_env_errors=True,
    )
    if executor == "ray":
        if isinstance(policy, BatchPolicy) or not callable(policy):
            raise ValueError("executor='ray' needs a factory of per-episode policies, not a batch policy")
        trajectories = collect(
            env,
            agent_factory=policy,
            tasks=list(tasks),
            n_episodes=len(tasks),
            concurrency=concurrency,
            executor="ray",
            ray_address=ray_address,
            **episodes,
        )
    elif executor == "batched":
        trajectories = collect_batched(env, policy, list(tasks), batch_size=batch_size, **episodes)
    else:
        raise ValueError(f"executor must be 'batched' or 'ray', got {executor!r}")
    return summarize_stage(trajectories, name=name, split=split), trajectories


def compare_stages(
    runs: Mapping[str, Sequence[Trajectory]], *, split: str = "", alpha: float = 0.05
) -> list[dict[str, Any]]:
    """Test every pair of stages (in the mapping's order) on the tasks both ran; one row per pair.

    ``diff`` and ``reward_diff`` are ``b - a`` on the paired episodes (positive: ``b`` is
    better). ``p_value`` is the exact McNemar test on success, ``reward_p_ttest`` and
    ``reward_p_wilcoxon`` test the rewards; each also comes Bonferroni-corrected over the
    ``n_comparisons`` pairs (``*_bonferroni``), and ``significant`` is ``p_value_bonferroni < alpha``.
    ``reward_diffs_equal`` says every paired reward difference is the same: the t statistic is
    then undefined (zero variance) and ``reward_p_ttest`` only a convention (1 or 0).
    """
    if len(runs) < 2:
        raise ValueError("compare_stages needs at least two stages")
    rows = []
    for a, b in combinations(runs, 2):
        pairs = pair_by_task(runs[a], runs[b])
        if not pairs:
            raise ValueError(f"stages {a!r} and {b!r} share no task id: nothing to pair")
        success_a = [succeeded(x) for x, _ in pairs]
        success_b = [succeeded(y) for _, y in pairs]
        reward_a = [episode_reward(x) for x, _ in pairs]
        reward_b = [episode_reward(y) for _, y in pairs]
        mcnemar = mcnemar_exact(success_a, success_b)
        rows.append(
            {
                "a": a,
                "b": b,
                "split": split,
                "n_pairs": len(pairs),
                "success_a": float(np.mean(success_a)),
                "success_b": float(np.mean(success_b)),
                "diff": float(np.mean(success_b) - np.mean(success_a)),
                "a_only": mcnemar["a_only"],
                "b_only": mcnemar["b_only"],
                "p_value": mcnemar["p_value"],
                "test": "mcnemar",
                "reward_a": float(np.mean(reward_a)),
                "reward_b": float(np.mean(reward_b)),
                "reward_diff": float(np.mean(reward_b) - np.mean(reward_a)),
                "reward_p_ttest": paired_ttest(reward_a, reward_b),
                "reward_p_wilcoxon": wilcoxon_signed_rank(reward_a, reward_b),
                "reward_diffs_equal": bool(np.ptp(np.subtract(reward_b, reward_a)) < 1e-12),
            }
        )
    for key in ("p_value", "reward_p_ttest", "reward_p_wilcoxon"):
        for row, adjusted in zip(rows, bonferroni([r[key] for r in rows])):
            row[f"{key}_bonferroni"] = adjusted
    for row in rows:
        row["n_comparisons"] = len(rows)
        row["alpha"] = alpha
        row["significant"] = row["p_value_bonferroni"] < alpha
    return rows


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of ``k`` of the ``n`` samples (``c`` correct) succeeds.

    ``1 - C(n - c, k) / C(n, k)``: n = 4, c = 1 gives pass@1 = 0.25 and pass@4 = 1; n = 4,
    c = 2, k = 2 gives ``1 - C(2, 2) / C(4, 2) = 1 - 1/6 = 0.83333``.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - comb(n - c, k) / comb(n, k)


def summarize_samples(trajectories: Sequence[Trajectory], *, name: str, split: str = "", k: int) -> dict[str, Any]:
    """pass@1 and pass@k of ``k`` (or more) sampled episodes per task, grouped by task id.

    Returns ``{"name", "split", "k", "n_tasks", "episodes", "pass@1", "pass@k", "per_task"}``;
    ``per_task`` maps a task id to its success rate. Tasks with fewer than ``k`` episodes raise.
    """
    outcomes: dict[str, list[bool]] = defaultdict(list)
    for t in trajectories:
        outcomes[t.task.id or "?"].append(succeeded(t))
    if not outcomes:
        raise ValueError(f"stage {name!r} has no trajectories to summarise")
    short = sorted(task for task, runs in outcomes.items() if len(runs) < k)
    if short:
        raise ValueError(f"stage {name!r}: {len(short)} tasks have fewer than k={k} episodes (e.g. {short[0]})")
    per_task = {task: sum(runs) / len(runs) for task, runs in sorted(outcomes.items())}
    return {
        "name": name,
        "split": split,
        "k": k,
        "n_tasks": len(per_task),
        "episodes": len(trajectories),
        "pass@1": float(np.mean(list(per_task.values()))),
        "pass@k": float(np.mean([pass_at_k(len(runs), sum(runs), k) for runs in outcomes.values()])),
        "per_task": per_task,
    }


def evaluate_sampled(
    policy: Any, tasks: Sequence[TaskInfo | dict], *, k: int, name: str = "policy", split: str = "", **kwargs: Any
) -> tuple[dict[str, Any], list[Trajectory]]:
    """Run ``policy`` (sampling, temperature > 0) ``k`` times on every task; ``summarize_samples``
    of the run and its trajectories. ``kwargs`` go to ``evaluate_policy`` (env, max_steps, ...);
    the ``k`` copies of a task are played side by side, so one batch holds them all."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    repeated = [task for task in tasks for _ in range(k)]
    _, trajectories = evaluate_policy(policy, repeated, name=name, split=split, **kwargs)
    return summarize_samples(trajectories, name=name, split=split, k=k), trajectories


def compare_sampled(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Paired test of two ``summarize_samples`` results on the tasks both ran (``b - a``).

    ``p_value`` is the two-sided Wilcoxon signed-rank test on the per-task success rates (ties
    and zero differences as scipy's default handles them), ``p_ttest`` the paired t-test.
    """
    shared = sorted(set(a["per_task"]) & set(b["per_task"]))
    if not shared:
        raise ValueError(f"stages {a['name']!r} and {b['name']!r} share no task id: nothing to pair")
    rate_a = [a["per_task"][t] for t in shared]
    rate_b = [b["per_task"][t] for t in shared]
    return {
        "a": a["name"],
        "b": b["name"],
        "split": a.get("split", ""),
        "k": a["k"],
        "n_tasks": len(shared),
        "pass1_a": float(np.mean(rate_a)),
        "pass1_b": float(np.mean(rate_b)),
        "diff": float(np.mean(rate_b) - np.mean(rate_a)),
        "better_tasks": sum(y > x for x, y in zip(rate_a, rate_b)),
        "worse_tasks": sum(y < x for x, y in zip(rate_a, rate_b)),
        "p_value": wilcoxon_signed_rank(rate_a, rate_b),
        "test": "wilcoxon",
        "p_ttest": paired_ttest(rate_a, rate_b),
    }


def template_table(
    runs: Mapping[str, Mapping[str, Sequence[Trajectory]]],
    *,
    seen_templates: Sequence[str] = (),
    key: str = "template",
    roles: Mapping[str, str] | None = None,
) -> tuple[list[str], list[list[str]]]:
    """Success per task template: one row per (split, template), one column per stage.

    ``runs`` maps a stage name to ``{split: trajectories}``; a template is read from the task's
    ``metadata[key]`` (``"?"`` without one; ``key="category"`` groups BFCL tasks by category).
    ``seen_templates`` (those training used) mark each row as seen or unseen; ``roles``
    (template -> its role in the suite: demonstrated, verifier_only, held_out) names the role
    instead. Cells read ``successes/episodes``.
    """
    stages = list(runs)
    cells: dict[tuple[str, str], dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for stage, by_split in runs.items():
        for split, trajectories in by_split.items():
            for t in trajectories:
                template = str((t.task.metadata or {}).get(key, "?"))
                cells[split, template][stage].append(succeeded(t))
    seen = set(seen_templates)
    header = ["split", key, "role" if roles else f"{key} in train", *stages]

    def mark(template: str) -> str:
        if roles:
            return roles.get(template, "?")
        return ("yes" if template in seen else "no") if seen else "?"

    rows = []
    for (split, template), by_stage in sorted(cells.items()):
        rows.append([split, template, mark(template), *(_fraction(by_stage.get(stage, [])) for stage in stages)])
    return header, rows


def _fraction(outcomes: Sequence[bool]) -> str:
    return f"{sum(outcomes)}/{len(outcomes)}" if outcomes else "–"


#: The scripted expert (replays ``task.metadata.solution``), for tasks that name no suite.
ExpertReplay = SolutionReplay
