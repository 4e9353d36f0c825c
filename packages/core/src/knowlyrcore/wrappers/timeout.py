"""``TimeoutWrapper``: truncate an episode once its wall-clock budget is spent.

A step in progress is not interrupted (killing a command is the sandbox's job, which has
per-command timeouts); the episode is truncated at the first step that ends past the budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from knowlyrcore.env import AgentEnv, EnvWrapper
from knowlyrcore.timestep import TimeStep


class TimeoutWrapper(EnvWrapper):
    """Sets ``truncated=True`` on the first step that ends ``timeout`` seconds after reset.

    ``clock`` is injectable so tests can drive time instead of sleeping.
    """

    def __init__(self, env: AgentEnv, timeout: float, *, clock: Callable[[], float] = time.monotonic):
        super().__init__(env)
        if not timeout > 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
        self.timeout = float(timeout)
        self._clock = clock
        self._started: float | None = None

    @property
    def elapsed(self) -> float:
        """Seconds since the last reset (0 before the first one)."""
        return 0.0 if self._started is None else self._clock() - self._started

    def reset(self, *, task=None, seed=None) -> TimeStep:
        ts = self.env.reset(task=task, seed=seed)
        self._started = self._clock()
        return ts

    def step(self, action) -> TimeStep:
        if self._started is None:
            raise RuntimeError("call reset() before step()")
        ts = self.env.step(action)
        if self.elapsed >= self.timeout and not ts.done:
            ts.truncated = True
            ts.info["truncation_reason"] = "timeout"
        return ts
