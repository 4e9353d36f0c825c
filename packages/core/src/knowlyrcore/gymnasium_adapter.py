"""``to_gymnasium``: expose an AgentEnv as a ``gymnasium.Env`` (extra ``gymnasium``).

Observations are strings; actions are ``{"tool": str, "params": dict}`` dicts. Gymnasium's
built-in spaces cannot describe arbitrary text or JSON, so the adapter defines two small
spaces: ``TextObservationSpace`` (any string) and ``ToolCallSpace`` (a tool from the
environment's list with a dict of parameters; ``sample()`` picks a tool with no parameters).
The task is passed through ``reset(options={"task": ...})``.
"""

from __future__ import annotations

from typing import Any

from knowlyrcore.env import AgentEnv
from knowlyrcore.errors import require_extra

gymnasium = require_extra("gymnasium", "knowlyr-core", "gymnasium", "to_gymnasium")
spaces = require_extra("gymnasium.spaces", "knowlyr-core", "gymnasium", "to_gymnasium")


class TextObservationSpace(spaces.Space[str]):
    """Any Python string."""

    def __init__(self, seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return ""

    def contains(self, x: Any) -> bool:
        return isinstance(x, str)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, TextObservationSpace)

    def __repr__(self) -> str:
        return "TextObservationSpace()"


class ToolCallSpace(spaces.Space[dict]):
    """Tool calls ``{"tool": name, "params": dict}`` over a fixed list of tool names."""

    def __init__(self, tools: list[str], seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.tools = list(tools)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, Any]:
        if not self.tools:
            raise ValueError("cannot sample a tool call: the environment declares no tools")
        return {"tool": self.tools[int(self.np_random.integers(len(self.tools)))], "params": {}}

    def contains(self, x: Any) -> bool:
        return isinstance(x, dict) and x.get("tool") in self.tools and isinstance(x.get("params", {}), dict)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ToolCallSpace) and other.tools == self.tools

    def __repr__(self) -> str:
        return f"ToolCallSpace({self.tools})"


class GymnasiumEnv(gymnasium.Env):
    """A ``gymnasium.Env`` view of an ``AgentEnv``."""

    metadata = {"render_modes": []}

    def __init__(self, env: AgentEnv):
        self.env = env
        self.observation_space = TextObservationSpace()
        self.action_space = ToolCallSpace(env.available_tools)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        ts = self.env.reset(task=(options or {}).get("task"), seed=seed)
        return ts.observation, dict(ts.info)

    def step(self, action: dict[str, Any]):
        ts = self.env.step(action)
        return ts.observation, float(ts.reward), bool(ts.terminated), bool(ts.truncated), dict(ts.info)

    def close(self) -> None:
        self.env.close()


def to_gymnasium(env: AgentEnv) -> GymnasiumEnv:
    """Wrap ``env`` so gymnasium tooling (its env checker, its wrappers) can drive it."""
    return GymnasiumEnv(env)
