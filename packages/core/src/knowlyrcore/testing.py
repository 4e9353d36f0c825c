"""Test helpers: the standard environment suite and component requirements.

Every environment in every package runs the same suite by subclassing ``EnvConformance``::

    from knowlyrcore.testing import EnvConformance

    class TestMyEnv(EnvConformance):
        task = "fix the bug"
        actions = [{"tool": "bash", "params": {"command": "ls"}}]
        terminal_action = {"tool": "submit", "params": {}}

        def make_env(self):
            return MyEnv()

``require(available, reason)`` skips a test whose component (Docker, a model) is missing, and
fails it instead when ``KNOWLYR_REQUIRE_COMPONENTS=1`` (CI sets it) so nothing is silently
skipped there.
"""

from __future__ import annotations

import json
import os
from typing import Any, ClassVar

import pytest

from knowlyrcore.checker import check_env
from knowlyrcore.env import AgentEnv
from knowlyrcore.timestep import TimeStep
from knowlyrcore.trajectory import Trajectory
from knowlyrcore.wrappers import MaxStepsWrapper, RecorderWrapper

REQUIRE_ENV_VAR = "KNOWLYR_REQUIRE_COMPONENTS"


def require(available: bool, reason: str) -> None:
    """Skip the calling test when ``available`` is false, or fail it under CI's strict mode."""
    if available:
        return
    if os.environ.get(REQUIRE_ENV_VAR, "") not in ("", "0", "false", "no"):
        pytest.fail(f"required component missing ({REQUIRE_ENV_VAR} is set): {reason}")
    pytest.skip(reason)


class EnvConformance:
    """The protocol suite every ``AgentEnv`` implementation passes. Subclass and set ``make_env``."""

    #: task passed to reset()
    task: ClassVar[Any] = None
    #: non-terminal actions that must succeed after reset()
    actions: ClassVar[list[dict[str, Any]]] = []
    #: an action that ends the episode (terminated=True), or None if the env has none
    terminal_action: ClassVar[dict[str, Any] | None] = None
    #: whether reset() with the same seed must give the same first observation
    deterministic_reset: ClassVar[bool] = True

    def make_env(self) -> AgentEnv:
        raise NotImplementedError("subclasses return a fresh environment")

    @pytest.fixture
    def env(self):
        env = self.make_env()
        try:
            yield env
        finally:
            env.close()

    def test_check_env_passes(self, env):
        check_env(
            env,
            task=self.task,
            actions=self.actions or None,
            check_determinism=self.deterministic_reset,
            make_env=self.make_env,
        )

    def test_reset_returns_fresh_timestep(self, env):
        ts = env.reset(task=self.task, seed=0)
        assert isinstance(ts, TimeStep)
        assert not ts.done

    def test_available_tools_are_names(self, env):
        tools = env.available_tools
        assert isinstance(tools, list) and all(isinstance(t, str) and t for t in tools)
        for action in self.actions + ([self.terminal_action] if self.terminal_action else []):
            assert action["tool"] in tools, f"test action uses {action['tool']!r}, not in available_tools"

    def test_actions_step_without_ending(self, env):
        env.reset(task=self.task, seed=0)
        for action in self.actions:
            ts = env.step(action)
            assert isinstance(ts, TimeStep)
            assert not ts.terminated, f"non-terminal action {action} terminated the episode"

    def test_terminal_action_terminates(self, env):
        if self.terminal_action is None:
            pytest.skip("environment declares no terminal action")
        env.reset(task=self.task, seed=0)
        ts = env.step(self.terminal_action)
        assert ts.terminated and ts.done

    def test_recorded_trajectory_validates_and_round_trips(self, env):
        recorded = RecorderWrapper(env, agent_name="conformance")
        recorded.reset(task=self.task, seed=0)
        steps = [*self.actions, *([self.terminal_action] if self.terminal_action else [])]
        for action in steps:
            if recorded.step(action).done:
                break
        trajectory = recorded.get_trajectory()
        assert len(trajectory.steps) == len(steps)
        assert [s.tool_call.name for s in trajectory.steps] == [a["tool"] for a in steps]
        again = Trajectory.model_validate(json.loads(trajectory.model_dump_json()))
        assert again == trajectory

    def test_max_steps_wrapper_truncates(self, env):
        if not self.actions:
            pytest.skip("needs a non-terminal action")
        limited = MaxStepsWrapper(env, max_steps=1)
        limited.reset(task=self.task, seed=0)
        ts = limited.step(self.actions[0])
        assert ts.done

    def test_context_manager_and_double_close(self):
        with self.make_env() as env:
            env.reset(task=self.task, seed=0)
        env.close()
