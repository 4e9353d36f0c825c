import pytest

pytest.importorskip("agentreward")

from trajectoryhub import collect, make_reward_fn


def test_process_reward_penalises_repeated_guesses(guess_env):
    agent = lambda obs: {"tool": "guess", "params": {"n": 1}}  # noqa: E731 - always the same guess
    (t,) = collect(guess_env, agent, tasks=[{"metadata": {"target": 5}}], max_steps=3, progress=False,
                   reward_fn=make_reward_fn("generic"))  # fmt: skip
    first, second, _ = t.step_rewards
    assert first > second  # the second identical call is redundant (guess is not a mutating tool name)


def test_doctest_style_use():
    fn = make_reward_fn("coding", task_description="fix a.py")
    from knowlyrcore import TimeStep

    value = fn({"tool": "read_file", "params": {"path": "a.py"}}, TimeStep("x = 1"), [])
    assert 0 < value <= 1
