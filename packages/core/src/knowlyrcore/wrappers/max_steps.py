"""``MaxStepsWrapper``: truncate an episode after a fixed number of steps (the horizon)."""

from __future__ import annotations

from knowlyrcore.env import AgentEnv, EnvWrapper
from knowlyrcore.timestep import TimeStep


class MaxStepsWrapper(EnvWrapper):
    """Sets ``truncated=True`` on the ``max_steps``-th step unless the episode already ended.

    ``info["truncation_reason"]`` is ``"max_steps"`` when this wrapper cut the episode. A task
    that sets its own ``max_steps`` (``TaskInfo.max_steps``) gets the smaller of the two.
    """

    def __init__(self, env: AgentEnv, max_steps: int):
        super().__init__(env)
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
        self.max_steps = max_steps
        #: This episode's limit: ``max_steps``, or the task's own ``max_steps`` when smaller.
        self.episode_limit = max_steps
        self.elapsed_steps = 0

    def reset(self, *, task=None, seed=None) -> TimeStep:
        self.elapsed_steps = 0
        own = task.get("max_steps") if isinstance(task, dict) else getattr(task, "max_steps", None)
        self.episode_limit = min(self.max_steps, own) if isinstance(own, int) and own >= 1 else self.max_steps
        return self.env.reset(task=task, seed=seed)

    def step(self, action) -> TimeStep:
        ts = self.env.step(action)
        self.elapsed_steps += 1
        if self.elapsed_steps >= self.episode_limit and not ts.done:
            ts.truncated = True
            ts.info["truncation_reason"] = "max_steps"
        return ts
