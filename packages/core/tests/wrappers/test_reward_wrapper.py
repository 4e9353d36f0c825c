import math

import pytest

from knowlyrcore.wrappers import RewardWrapper

INC = {"tool": "inc", "params": {}}


def test_replaces_reward_and_keeps_env_reward(counter_env):
    env = RewardWrapper(counter_env, reward_fn=lambda action, ts, history: 0.5)
    env.reset()
    ts = env.step(INC)
    assert ts.reward == 0.5
    assert ts.info["env_reward"] == pytest.approx(0.1)


def test_add_mode_sums(counter_env):
    env = RewardWrapper(counter_env, reward_fn=lambda a, ts, h: 1.0, mode="add")
    env.reset()
    assert env.step(INC).reward == pytest.approx(1.1)


def test_history_holds_earlier_transitions(counter_env):
    seen = []

    def penalise_repeats(action, ts, history):
        seen.append(len(history))
        return -1.0 if any(t.action == action for t in history) else 1.0

    env = RewardWrapper(counter_env, reward_fn=penalise_repeats)
    env.reset()
    rewards = [env.step(INC).reward for _ in range(3)]
    assert rewards == [1.0, -1.0, -1.0]
    assert seen == [0, 1, 2]
    env.reset()
    assert env.history == []


def test_non_numeric_reward_is_an_error(counter_env):
    env = RewardWrapper(counter_env, reward_fn=lambda a, ts, h: "good")
    env.reset()
    with pytest.raises(TypeError, match="must return a number"):
        env.step(INC)


def test_non_finite_reward_is_an_error(counter_env):
    env = RewardWrapper(counter_env, reward_fn=lambda a, ts, h: math.nan)
    env.reset()
    with pytest.raises(ValueError, match="finite"):
        env.step(INC)


def test_bad_arguments(counter_env):
    with pytest.raises(TypeError):
        RewardWrapper(counter_env, reward_fn=3)
    with pytest.raises(ValueError, match="mode"):
        RewardWrapper(counter_env, reward_fn=lambda a, t, h: 0, mode="multiply")
