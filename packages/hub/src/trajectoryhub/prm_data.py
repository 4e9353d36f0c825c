"""Step labels for a learned process reward model, from Monte-Carlo continuations.

A step's value is the probability that the task still succeeds after it. ``step_values``
estimates it the way AgentPRM-style work does: put the environment back in the state the step
left (a fresh environment, reset on the task, replaying the recorded calls up to and including
the step), let a continuation policy play on from there ``k`` times, and average the outcomes.
The last step needs no continuation: the run's own outcome is its value.

**The continuation policy.** By default it is the task's expert resuming its solution
(``ResumeExpert``): it makes the calls of ``task.metadata.solution`` that the prefix has not
already made successfully, in the solution's order, ending with the solution's answer. The
environments and the expert are deterministic, so one continuation (``k = 1``) is exact: the
value is 1 when the task can still be solved from the step's state and 0 when the step did
something no later call undoes (cancelled the wrong order, ended the episode with a wrong answer).
It costs no model call and about ``n (n + len(solution)) / 2`` environment steps for a run of
``n`` steps. Another continuation can be given (``continuation(prefix_steps)`` returns a
per-episode agent; ``k`` runs each): a sampling policy's would estimate that policy's own success
from the step, at ``k · n`` episodes of model calls per run; the agent gets only the observations
after the prefix, so it must take the prefix's history from the steps it is given.

**The run's own continuation** (``outcome_values``): every step is labelled with the outcome of
the run it belongs to. What followed a step in a recorded run is one continuation of it by the
policy that made the run, so this is the same Monte-Carlo estimate with ``k = 1`` and that policy
as the continuation: the value of the step for *that* policy, not for the expert. It costs
nothing (no replay, any environment, no solution needed) and is noisy per run; over many runs of
a policy it learns what that policy's runs look like when they go wrong. The expert's value
says "can this still be solved", which a policy that cannot recover would overrate: with the
policy's own runs in the data (a small model's, whose mid-run slips the expert repairs but the
policy does not), the own-outcome labels gave the better scorer (packages/reward/README.md).

**Checked replays.** A replay must reproduce what the run saw: when a replayed call's
observation differs from the recorded one (an environment that is not deterministic, or a
record from another environment version), the run gets no continuation labels, only its final
outcome, and ``prm_records`` counts it as ``unreplayable``.

``prm_records`` turns labelled runs into ``knowlyrcore.datasets.PRMRecord`` lines, one per step,
their text rendered by ``knowlyrcore.prefix_text.step_prefixes`` (the renderer the learned layer
scores with) and ``group`` the task's template, for held-out-template splits.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from knowlyrcore.datasets import PRMRecord
from knowlyrcore.policy import SolutionReplay
from knowlyrcore.prefix_text import step_prefixes
from trajectoryhub.batched import collect_batched

#: ``continuation(prefix_steps)``: a fresh agent that plays on after those steps (trajectory records)
Continuation = Callable[[list[dict[str, Any]]], Any]


def _call_key(tool: str, params: Any) -> str:
    return json.dumps([tool, params or {}], sort_keys=True, default=str)


class ResumeExpert:
    """The expert playing on after ``prefix_steps``: the solution's calls not already made
    without an error, in order; then its answer again, should the episode still run."""

    def __init__(self, prefix_steps: Sequence[dict[str, Any]]):
        self.made = Counter(
            _call_key(s["tool_call"]["name"], s["tool_call"].get("parameters"))
            for s in prefix_steps
            if not (s.get("observation") or {}).get("error")
        )
        self.actions: list[dict[str, Any]] = []

    def reset(self, task: Any = None) -> None:
        expert = SolutionReplay()
        expert.reset(task)
        made = Counter(self.made)
        self.actions = []
        for action in expert.actions:
            key = _call_key(action["tool"], action.get("params"))
            if made[key] > 0:
                made[key] -= 1
            else:
                self.actions.append(action)
        if not self.actions or self.actions[-1] is not expert.actions[-1]:
            self.actions.append(expert.actions[-1])  # the answer closes every episode

    def __call__(self, observation: Any) -> dict[str, Any]:
        return self.actions.pop(0) if len(self.actions) > 1 else self.actions[0]


class ReplayThen:
    """Plays recorded calls first, then hands over to another agent (``then``) for the rest."""

    def __init__(self, calls: Sequence[dict[str, Any]], then: Any):
        self.calls = [dict(call) for call in calls]
        self.then = then
        self.turn = 0

    def reset(self, task: Any = None) -> None:
        self.turn = 0
        if hasattr(self.then, "reset"):
            self.then.reset(task)

    def __call__(self, observation: Any) -> Any:
        if self.turn < len(self.calls):
            self.turn += 1
            return self.calls[self.turn - 1]
        return self.then(observation)


def recorded_calls(trajectory: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's steps as actions (``{"tool", "params"}``), to replay them."""
    return [
        {"tool": step["tool_call"]["name"], "params": dict(step["tool_call"].get("parameters") or {})}
        for step in trajectory.get("steps") or []
    ]


def _observations(trajectory: dict[str, Any]) -> list[tuple[str, Any]]:
    return [
        ((s.get("observation") or {}).get("output", ""), (s.get("observation") or {}).get("error"))
        for s in trajectory["steps"]
    ]


def _success(trajectory: Any) -> bool:
    outcome = trajectory.outcome if hasattr(trajectory, "outcome") else (trajectory.get("outcome") or {})
    value = outcome.success if hasattr(outcome, "success") else outcome.get("success")
    return bool(value)


@dataclass
class LabelledRun:
    """A run and its steps' values (``None``: not labelled, the run could not be replayed)."""

    trajectory: dict[str, Any]
    values: list[float] | None
    continuations: int = 0


@dataclass
class LabelStats:
    runs: int = 0
    steps: int = 0
    unreplayable: int = 0
    by_value: dict[str, int] = field(default_factory=dict)


def step_values(
    runs: Sequence[dict[str, Any]],
    *,
    env: str,
    env_kwargs: dict[str, Any] | None = None,
    continuation: Continuation = ResumeExpert,
    k: int = 1,
    max_steps: int = 30,
    batch_size: int = 64,
    progress: bool = False,
) -> list[LabelledRun]:
    """Each run's step values: the mean outcome of ``k`` continuations from every step but the
    last, whose value is the run's outcome. ``runs`` are trajectory records with their task
    (and, for the default expert, its ``metadata.solution``)."""
    if k < 1:
        raise ValueError("k (continuations per step) must be >= 1")
    jobs: list[tuple[int, int]] = []  # (run, step) per continuation episode
    tasks: list[Any] = []
    calls_of = [recorded_calls(run) for run in runs]
    for r, run in enumerate(runs):
        for i in range(len(run.get("steps") or []) - 1):  # the last step's value is the outcome
            for _ in range(k):
                jobs.append((r, i))
                tasks.append(run["task"])
    # every job is its own episode: the agent replays the prefix, then the continuation plays
    queue = iter(jobs)

    def agent() -> ReplayThen:
        r, i = next(queue)
        return ReplayThen(calls_of[r][: i + 1], continuation(runs[r]["steps"][: i + 1]))

    played = (
        collect_batched(
            env,
            agent,
            tasks,
            max_steps=max_steps,
            env_kwargs=env_kwargs,
            batch_size=batch_size,
            progress=progress,
            record_env_errors=True,
            agent_name="continuation",
        )
        if jobs
        else []
    )
    sums: dict[tuple[int, int], float] = {}
    replayable = [True] * len(runs)
    for (r, i), episode in zip(jobs, played):
        record = episode.model_dump(mode="json")
        if _observations(record)[: i + 1] != _observations(runs[r])[: i + 1]:
            replayable[r] = False
        sums[(r, i)] = sums.get((r, i), 0.0) + (1.0 if _success(episode) else 0.0)
    labelled = []
    for r, run in enumerate(runs):
        n = len(run.get("steps") or [])
        if not replayable[r]:
            labelled.append(LabelledRun(run, None))
            continue
        values = [sums[(r, i)] / k for i in range(n - 1)] + ([1.0 if _success(run) else 0.0] if n else [])
        labelled.append(LabelledRun(run, values, k))
    return labelled


def outcome_values(runs: Sequence[dict[str, Any]]) -> list[LabelledRun]:
    """Each run's steps all valued at the run's own outcome (1 or 0): its own continuation,
    ``k = 1``, by the policy that made it. Needs no environment."""
    return [
        LabelledRun(run, [1.0 if _success(run) else 0.0] * len(run.get("steps") or []), 1 if run.get("steps") else 0)
        for run in runs
    ]


def prm_records(labelled: Iterable[LabelledRun], stats: LabelStats | None = None) -> Iterable[PRMRecord]:
    """One ``PRMRecord`` per labelled step (an unreplayable run gives only its last step, whose
    value is its known outcome)."""
    stats = stats if stats is not None else LabelStats()
    for run in labelled:
        trajectory = run.trajectory
        steps = trajectory.get("steps") or []
        if not steps:
            continue
        stats.runs += 1
        task = trajectory.get("task") or {}
        texts = step_prefixes(trajectory)  # reads only the description and the steps: no label
        if run.values is None:
            stats.unreplayable += 1
            values = {len(steps) - 1: 1.0 if _success(trajectory) else 0.0}
        else:
            values = dict(enumerate(run.values))
        for i, value in values.items():
            stats.steps += 1
            stats.by_value[str(value)] = stats.by_value.get(str(value), 0) + 1
            yield PRMRecord(
                text=texts[i],
                label=value,
                task_id=task.get("id"),
                trajectory_id=trajectory.get("id") or f"{task.get('id')}/{trajectory.get('agent', '')}",
                step=i,
                group=group_of(trajectory),
                continuations=0 if i == len(steps) - 1 else run.continuations,
            )


def group_of(trajectory: dict[str, Any]) -> str | None:
    """What a held-out split leaves out: the task's template, else its domain."""
    task = trajectory.get("task") or {}
    return (task.get("metadata") or {}).get("template") or task.get("domain")
