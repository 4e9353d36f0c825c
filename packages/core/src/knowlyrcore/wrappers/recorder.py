"""``RecorderWrapper``: record every episode in the trajectory schema."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from knowlyrcore.env import AgentEnv, EnvWrapper
from knowlyrcore.recording import TrajectoryBuilder
from knowlyrcore.timestep import TimeStep
from knowlyrcore.trajectory import Trajectory

# keys of TimeStep.info that map onto schema fields instead of step metadata
_STEP_INFO_KEYS = ("exit_code", "error")
_OUTCOME_INFO_KEYS = ("success", "score", "tests", "exit_status", "patch")


class RecorderWrapper(EnvWrapper):
    """Records actions, observations, rewards and timing; ``get_trajectory()`` returns them.

    The outcome comes from the final step's ``info`` (``success``, ``score``, ``tests``,
    ``exit_status``, ``patch``) when the environment reports them. A finished episode is also
    handed to ``on_episode_end`` and appended to ``output_path`` (JSONL, atomic) when given.
    Place it outermost to record what the agent saw after every other wrapper.
    """

    def __init__(
        self,
        env: AgentEnv,
        agent_name: str = "agent",
        *,
        model_name: str = "",
        output_path: str | os.PathLike | None = None,
        on_episode_end: Callable[[Trajectory], None] | None = None,
    ):
        super().__init__(env)
        self.agent_name = agent_name
        self.model_name = model_name
        self.output_path = output_path
        self.on_episode_end = on_episode_end
        self._builder: TrajectoryBuilder | None = None
        self._last: TimeStep | None = None
        self.episodes: list[Trajectory] = []

    def reset(self, *, task=None, seed=None) -> TimeStep:
        ts = self.env.reset(task=task, seed=seed)
        spec = self.env.spec
        self._builder = TrajectoryBuilder(
            task,
            agent=self.agent_name,
            model=self.model_name,
            source=f"env:{spec.id}" if spec is not None else f"env:{type(self.unwrapped).__name__}",
            metadata={"seed": seed, "initial_observation": ts.observation if isinstance(ts.observation, str) else None},
        )
        if self._builder.task.domain == "generic" and self.domain != "generic":
            self._builder.task = self._builder.task.model_copy(update={"domain": self.domain})
        self._last = ts
        return ts

    def step(self, action) -> TimeStep:
        if self._builder is None:
            raise RuntimeError("call reset() before step()")
        started, clock = time.time(), time.perf_counter()
        ts = self.env.step(action)
        duration = time.perf_counter() - clock
        extra = {k: v for k, v in ts.info.items() if k not in _STEP_INFO_KEYS + _OUTCOME_INFO_KEYS}
        self._builder.add_step(
            action,
            ts.observation,
            exit_code=_as_int(ts.info.get("exit_code")),
            error=_as_str(ts.info.get("error")),
            reward=float(ts.reward),
            timestamp=started,
            duration_s=duration,
            metadata=_jsonable(extra),
        )
        self._last = ts
        if ts.done:
            trajectory = self.get_trajectory()
            self.episodes.append(trajectory)
            if self.output_path is not None:
                from knowlyrcore.jsonl import write_trajectories

                write_trajectories(self.output_path, [trajectory], append=True)
            if self.on_episode_end is not None:
                self.on_episode_end(trajectory)
        return ts

    def record_refused(self, action: Any, error: str) -> None:
        """Record an action the environment refused by raising (e.g. ``InvalidActionError``) as a
        step whose observation is the error, so the trajectory shows every attempt in order."""
        if self._builder is None:
            raise RuntimeError("call reset() before record_refused()")
        self._builder.add_step(
            action, f"Error: {error}", error=error, reward=0.0, timestamp=time.time(), duration_s=0.0
        )

    def get_trajectory(self) -> Trajectory:
        """The current (or just finished) episode as a validated ``Trajectory``."""
        if self._builder is None:
            raise RuntimeError("nothing recorded yet: call reset() first")
        info: dict[str, Any] = self._last.info if self._last is not None else {}
        terminated = bool(self._last and self._last.terminated)
        truncated = bool(self._last and self._last.truncated)
        exit_status = info.get("exit_status") or info.get("truncation_reason")
        if exit_status is None and (terminated or truncated):
            exit_status = "terminated" if terminated else "truncated"
        total = sum(s.reward or 0.0 for s in self._builder.steps)
        success = info.get("success")
        score = info.get("score")
        return self._builder.finish(
            success=bool(success) if success is not None else None,
            score=float(score) if score is not None else None,
            tests=info.get("tests"),
            exit_status=exit_status,
            patch=info.get("patch"),
            terminated=terminated,
            truncated=truncated,
            reward=total if self._builder.steps else None,
        )


def _as_int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _as_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    import json

    return json.loads(json.dumps(data, default=str))
