import pytest

from knowlyrcore.wrappers import TimeoutWrapper

INC = {"tool": "inc", "params": {}}


class FakeClock:
    """Time that moves only when the test says so (no sleeping in tests)."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_truncates_first_step_past_budget(counter_env):
    clock = FakeClock()
    env = TimeoutWrapper(counter_env, timeout=10, clock=clock)
    env.reset()
    clock.now += 5
    assert not env.step(INC).truncated
    clock.now += 5
    ts = env.step(INC)
    assert ts.truncated and ts.info["truncation_reason"] == "timeout"


def test_reset_restarts_the_clock(counter_env):
    clock = FakeClock()
    env = TimeoutWrapper(counter_env, timeout=10, clock=clock)
    env.reset()
    clock.now += 20
    env.reset()
    assert env.elapsed == 0
    assert not env.step(INC).truncated


def test_step_before_reset_is_an_error(counter_env):
    with pytest.raises(RuntimeError, match="reset"):
        TimeoutWrapper(counter_env, timeout=1).step(INC)


def test_real_clock_default_does_not_truncate_fast_episode(counter_env):
    env = TimeoutWrapper(counter_env, timeout=3600)
    env.reset()
    assert not env.step(INC).truncated


@pytest.mark.parametrize("bad", [0, -3])
def test_rejects_non_positive_timeout(counter_env, bad):
    with pytest.raises(ValueError, match="timeout"):
        TimeoutWrapper(counter_env, timeout=bad)
