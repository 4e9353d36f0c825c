"""Replay: re-execute a recorded trajectory's actions in a fresh environment and report every
step whose observation differs from the recorded one.

This is how a dataset is checked for reproducibility (did the recorded outputs really come
from these actions?) and how an environment change is checked for regressions. The
environment is the one named in the trajectory's ``source`` (``env:<id>``), else the one
registered for its task's domain.

Example:
    >>> report = replay(trajectory, backend="local")  # doctest: +SKIP
    >>> report.ok, [d.index for d in report.mismatches]  # doctest: +SKIP
    (False, [3])
"""

from __future__ import annotations

import difflib
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from knowlyrcore.env import AgentEnv
from knowlyrcore.registry import make
from knowlyrcore.trajectory import Trajectory

#: The environment replay uses for a trajectory of each domain when its source names none.
DOMAIN_ENVS = {
    "coding": "knowlyr/sandbox",
    "conversation": "knowlyr/conversation",
    "engineering": "knowlyr/engineering",
    "advisory": "knowlyr/advisory",
    "discussion": "knowlyr/discussion",
}


@dataclass
class StepMismatch:
    """One step whose replayed observation differs from the recording."""

    index: int
    tool: str
    recorded: str
    replayed: str
    diff: str


@dataclass
class ReplayReport:
    """The result of replaying one trajectory."""

    trajectory_id: str
    env_id: str
    steps_replayed: int
    mismatches: list[StepMismatch] = field(default_factory=list)
    stopped_early: bool = False

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.stopped_early

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def env_id_for(trajectory: Trajectory) -> str:
    """The environment a trajectory was recorded in (its ``source``) or its domain's default."""
    if trajectory.source and trajectory.source.startswith("env:"):
        return trajectory.source[len("env:") :]
    if trajectory.task.domain in DOMAIN_ENVS:
        return DOMAIN_ENVS[trajectory.task.domain]
    raise ValueError(
        f"trajectory {trajectory.id or '(no id)'}: cannot tell which environment recorded it "
        f"(source {trajectory.source!r}, domain {trajectory.task.domain!r}); pass env_id="
    )


def replay(
    trajectory: Trajectory | dict,
    *,
    env: AgentEnv | None = None,
    env_id: str | None = None,
    **env_kwargs: Any,
) -> ReplayReport:
    """Replay ``trajectory`` in ``env`` (or a fresh ``make(env_id, **env_kwargs)``)."""
    if isinstance(trajectory, dict):
        trajectory = Trajectory.model_validate(trajectory)
    env_id = env_id or (env.spec.id if env is not None and env.spec is not None else env_id_for(trajectory))
    own = env is None
    env = env if env is not None else make(env_id, **env_kwargs)
    report = ReplayReport(trajectory_id=trajectory.id, env_id=env_id, steps_replayed=0)
    try:
        env.reset(task=trajectory.task, seed=trajectory.metadata.get("seed"))
        for step in trajectory.steps:
            ts = env.step({"tool": step.tool_call.name, "params": step.tool_call.parameters})
            report.steps_replayed += 1
            replayed = ts.observation if isinstance(ts.observation, str) else str(ts.observation)
            if replayed != step.observation.output:
                lines = difflib.unified_diff(
                    step.observation.output.splitlines(), replayed.splitlines(), "recorded", "replayed", lineterm=""
                )
                report.mismatches.append(
                    StepMismatch(step.index, step.tool_call.name, step.observation.output, replayed, "\n".join(lines))
                )
            if ts.done and step.index < len(trajectory.steps) - 1:
                report.stopped_early = True
                break
    finally:
        if own:
            env.close()
    return report


def replay_file(path: str | os.PathLike, **kwargs: Any) -> list[ReplayReport]:
    """Replay every trajectory of a JSONL file (a file with none is a ``DataFormatError``)."""
    from knowlyrcore.errors import DataFormatError
    from knowlyrcore.jsonl import read_trajectories

    reports = [replay(t, **kwargs) for t in read_trajectories(path)]
    if not reports:
        raise DataFormatError(str(path), None, "no trajectories (empty file)")
    return reports
