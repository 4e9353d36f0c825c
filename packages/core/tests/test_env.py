import pytest

from knowlyrcore import AgentEnv, EnvWrapper, TimeStep


def test_abstract_methods_are_required():
    class Incomplete(AgentEnv):
        def reset(self, *, task=None, seed=None):
            return TimeStep()

    with pytest.raises(TypeError):
        Incomplete()


def test_context_manager_closes(counter_env):
    with counter_env as env:
        env.reset()
    assert counter_env.closed == 1


def test_available_tools_default_to_domain_profile():
    class Coder(AgentEnv):
        domain = "coding"

        def reset(self, *, task=None, seed=None):
            return TimeStep()

        def step(self, action):
            return TimeStep()

    assert "bash" in Coder().available_tools and "submit" in Coder().available_tools


def test_unknown_domain_has_no_default_tools():
    class Odd(AgentEnv):
        domain = "not-a-domain"

        def reset(self, *, task=None, seed=None):
            return TimeStep()

        def step(self, action):
            return TimeStep()

    assert Odd().available_tools == []


def test_wrapper_delegates_and_exposes_inner_attributes(counter_env):
    wrapped = EnvWrapper(EnvWrapper(counter_env))
    assert wrapped.available_tools == ["inc", "submit"]
    assert wrapped.domain == "generic"
    assert wrapped.unwrapped is counter_env
    assert wrapped.target == 2  # falls through to the inner env
    wrapped.reset()
    assert wrapped.step({"tool": "inc", "params": {}}).observation == "count=1"
    wrapped.close()
    assert counter_env.closed == 1


def test_wrapper_refuses_non_env():
    with pytest.raises(TypeError, match="wraps an AgentEnv"):
        EnvWrapper(object())


def test_wrapper_does_not_forward_private_names(counter_env):
    with pytest.raises(AttributeError):
        _ = EnvWrapper(counter_env)._secret


def test_repr_names_the_class(counter_env):
    assert "CounterEnv" in repr(EnvWrapper(counter_env))
