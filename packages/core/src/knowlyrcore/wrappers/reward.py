"""``RewardWrapper``: compute each step's reward with a user function (e.g. a process reward)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from knowlyrcore.env import AgentEnv, EnvWrapper
from knowlyrcore.timestep import TimeStep


class Transition(NamedTuple):
    """An earlier step of the episode as seen by a reward function."""

    action: Any
    timestep: TimeStep


RewardFn = Callable[[Any, TimeStep, Sequence[Transition]], float]


class RewardWrapper(EnvWrapper):
    """Replaces (or, with ``mode="add"``, adds to) the environment's reward.

    ``reward_fn(action, timestep, history)`` receives the action just taken, the environment's
    ``TimeStep`` for it and the episode's earlier ``Transition``s, and returns a float. The
    environment's own reward is kept in ``info["env_reward"]``.
    """

    def __init__(self, env: AgentEnv, reward_fn: RewardFn, *, mode: str = "replace"):
        super().__init__(env)
        if not callable(reward_fn):
            raise TypeError("reward_fn must be callable: reward_fn(action, timestep, history) -> float")
        if mode not in ("replace", "add"):
            raise ValueError(f"mode must be 'replace' or 'add', got {mode!r}")
        self.reward_fn = reward_fn
        self.mode = mode
        self.history: list[Transition] = []

    def reset(self, *, task=None, seed=None) -> TimeStep:
        self.history = []
        return self.env.reset(task=task, seed=seed)

    def step(self, action) -> TimeStep:
        ts = self.env.step(action)
        value = self.reward_fn(action, ts, tuple(self.history))
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"reward_fn returned {value!r}; it must return a number") from None
        if not math.isfinite(value):
            raise ValueError(f"reward_fn returned {value}; rewards must be finite")
        ts.info["env_reward"] = ts.reward
        ts.reward = value if self.mode == "replace" else ts.reward + value
        self.history.append(Transition(action, ts))
        return ts
