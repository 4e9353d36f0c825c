"""check_env catches each distinct protocol violation; every one has its own test."""

import pytest

from knowlyrcore import AgentEnv, EnvCheckError, InvalidActionError, TimeStep, check_env


class Good(AgentEnv):
    """A minimal correct environment; each test breaks one thing in a subclass."""

    def reset(self, *, task=None, seed=None):
        return TimeStep("ready")

    def step(self, action):
        if action["tool"] not in self.available_tools:
            raise InvalidActionError(f"unknown tool {action['tool']}")
        return TimeStep("ok", reward=0.0, terminated=action["tool"] == "submit")

    @property
    def available_tools(self):
        return ["look", "submit"]


def violations(env, **kwargs):
    with pytest.raises(EnvCheckError) as info:
        check_env(env, **kwargs)
    return info.value.violations


def test_correct_env_passes():
    assert check_env(Good(), make_env=Good) == []


def test_not_an_env():
    assert "must be an AgentEnv" in violations(object())[0]


def test_reset_must_return_timestep():
    class Bad(Good):
        def reset(self, *, task=None, seed=None):
            return "ready", {}

    assert any("reset() must return a TimeStep, got tuple" in v for v in violations(Bad()))


def test_reset_must_not_be_done():
    class Bad(Good):
        def reset(self, *, task=None, seed=None):
            return TimeStep("ready", terminated=True)

    assert any("finished TimeStep" in v for v in violations(Bad()))


def test_reset_must_accept_keyword_task_and_seed():
    class Bad(Good):
        def reset(self):
            return TimeStep("ready")

    assert any("reset(task=..., seed=...) raised TypeError" in v for v in violations(Bad()))


def test_step_must_return_timestep():
    class Bad(Good):
        def step(self, action):
            return ("ok", 0.0, False, False, {})

    assert any("step 0 must return a TimeStep" in v for v in violations(Bad()))


def test_reward_must_be_finite_number():
    class Bad(Good):
        def step(self, action):
            return TimeStep("ok", reward=float("nan"))

    assert any("reward must be a finite number" in v for v in violations(Bad()))


def test_flags_must_be_bool():
    class Bad(Good):
        def step(self, action):
            return TimeStep("ok", terminated="no")

    assert any("terminated must be a bool" in v for v in violations(Bad()))


def test_info_must_be_dict():
    class Bad(Good):
        def step(self, action):
            return TimeStep("ok", info=None)

    assert any("info must be a dict" in v for v in violations(Bad()))


def test_observation_must_be_serialisable():
    class Bad(Good):
        def reset(self, *, task=None, seed=None):
            return TimeStep(object())

    assert any("observation must be JSON-serialisable" in v for v in violations(Bad()))


def test_available_tools_must_be_names():
    class Bad(Good):
        @property
        def available_tools(self):
            return "look,submit"

    assert any("available_tools must be a list" in v for v in violations(Bad()))


def test_available_tools_must_be_unique():
    class Bad(Good):
        @property
        def available_tools(self):
            return ["look", "look"]

    assert any("lists a tool twice" in v for v in violations(Bad()))


def test_reset_must_be_reproducible_under_a_seed():
    class Bad(Good):
        calls = 0

        def reset(self, *, task=None, seed=None):
            type(self).calls += 1
            return TimeStep(f"ready #{self.calls}")

    assert any("not reproducible" in v for v in violations(Bad()))
    check_env(Bad(), check_determinism=False)


def test_unknown_tool_must_be_refused_cleanly():
    class Bad(Good):
        def step(self, action):
            return {"look": TimeStep("ok"), "submit": TimeStep("done", terminated=True)}[action["tool"]]

    assert any("unknown tool must be refused" in v and "KeyError" in v for v in violations(Bad()))


def test_error_observation_is_an_acceptable_refusal():
    class Lenient(Good):
        def step(self, action):
            if action["tool"] not in self.available_tools:
                return TimeStep(f"error: no tool {action['tool']}", info={"error": "unknown tool"})
            return super().step(action)

    assert check_env(Lenient()) == []


def test_step_crash_is_reported():
    class Bad(Good):
        def step(self, action):
            raise ZeroDivisionError("oops")

    assert any("raised ZeroDivisionError: oops" in v for v in violations(Bad()))


def test_close_must_be_idempotent():
    class Bad(Good):
        closed = False

        def close(self):
            if self.closed:
                raise RuntimeError("already closed")
            self.closed = True

    assert any("close() must be safe to call twice" in v for v in violations(Bad()))


def test_close_before_reset_must_work():
    class Bad(Good):
        started = False

        def reset(self, *, task=None, seed=None):
            self.started = True
            return super().reset(task=task, seed=seed)

        def close(self):
            if not self.started:
                raise AttributeError("no container")

    assert any("close() before reset() raised" in v for v in violations(Bad(), make_env=Bad))


def test_all_violations_are_reported_at_once():
    class Bad(Good):
        def step(self, action):
            return TimeStep(object(), reward=float("inf"), info=[])

    found = violations(Bad())
    assert len(found) >= 3
    assert "environment breaks the AgentEnv protocol" in str(EnvCheckError(found))


def test_refused_actions_become_warnings():
    with pytest.warns(UserWarning, match="rejected"):
        check_env(Good(), actions=[{"tool": "fly", "params": {}}])
