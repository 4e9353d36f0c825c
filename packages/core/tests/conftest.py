"""Shared fixtures: small environments that exercise the protocol without any backend."""

from __future__ import annotations

import pytest

from knowlyrcore import AgentEnv, TimeStep
from knowlyrcore.registry import _REGISTRY


class CounterEnv(AgentEnv):
    """Counts `inc` calls; `submit` ends the episode with success when the count hit the target."""

    domain = "generic"

    def __init__(self, target: int = 2):
        self.target = target
        self.count = 0
        self.closed = 0

    def reset(self, *, task=None, seed=None) -> TimeStep:
        self.count = 0
        return TimeStep(observation=f"count=0 target={self.target}")

    def step(self, action) -> TimeStep:
        from knowlyrcore import InvalidActionError, parse_action

        tool, params = parse_action(action)
        if tool == "inc":
            self.count += int(params.get("by", 1))
            return TimeStep(observation=f"count={self.count}", reward=0.1, info={"exit_code": 0})
        if tool == "submit":
            ok = self.count == self.target
            return TimeStep(
                observation="submitted",
                reward=1.0 if ok else 0.0,
                terminated=True,
                info={"success": ok, "score": 1.0 if ok else 0.0},
            )
        raise InvalidActionError(f"unknown tool {tool!r}")

    @property
    def available_tools(self):
        return ["inc", "submit"]

    def close(self):
        self.closed += 1


@pytest.fixture
def counter_env():
    return CounterEnv()


@pytest.fixture
def clean_registry():
    """Snapshot the registry so a test's register() calls (and any plugin discovery it
    triggers) do not leak into other tests, including other packages' in the same run."""
    from knowlyrcore import registry

    saved, loaded = dict(_REGISTRY), registry._PLUGINS_LOADED
    yield
    _REGISTRY.clear()
    _REGISTRY.update(saved)
    registry._PLUGINS_LOADED = loaded


@pytest.fixture
def counter_cls():
    return CounterEnv
