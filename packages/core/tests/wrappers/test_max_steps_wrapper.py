import pytest

from knowlyrcore import TaskInfo
from knowlyrcore.wrappers import MaxStepsWrapper

INC = {"tool": "inc", "params": {}}


def test_truncates_on_the_last_allowed_step(counter_env):
    env = MaxStepsWrapper(counter_env, max_steps=3)
    env.reset()
    flags = [env.step(INC).truncated for _ in range(3)]
    assert flags == [False, False, True]


def test_reason_is_reported(counter_env):
    env = MaxStepsWrapper(counter_env, max_steps=1)
    env.reset()
    assert env.step(INC).info["truncation_reason"] == "max_steps"


def test_terminal_step_is_not_marked_truncated(counter_env):
    env = MaxStepsWrapper(counter_env, max_steps=1)
    env.reset()
    ts = env.step({"tool": "submit", "params": {}})
    assert ts.terminated and not ts.truncated


def test_reset_restarts_the_count(counter_env):
    env = MaxStepsWrapper(counter_env, max_steps=2)
    env.reset()
    env.step(INC)
    env.reset()
    assert env.elapsed_steps == 0
    assert not env.step(INC).truncated


@pytest.mark.parametrize("bad", [0, -1, 1.5, None])
def test_rejects_non_positive_limits(counter_env, bad):
    with pytest.raises(ValueError, match="max_steps"):
        MaxStepsWrapper(counter_env, max_steps=bad)


@pytest.mark.parametrize(
    ("task", "cut_after"),
    [
        ({"description": "t", "max_steps": 2}, 2),
        (TaskInfo(description="t", max_steps=2), 2),
        ({"description": "t", "max_steps": 9}, 3),
        ("plain text task", 3),
        (None, 3),
    ],
)
def test_a_task_with_its_own_smaller_budget_is_cut_earlier(counter_env, task, cut_after):
    env = MaxStepsWrapper(counter_env, max_steps=3)
    env.reset(task=task)
    truncated = [env.step(INC).truncated for _ in range(cut_after)]
    assert truncated == [False] * (cut_after - 1) + [True]
