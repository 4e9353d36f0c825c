import pytest

from knowlyrcore import read_trajectories, register, unregister
from trajectoryhub import collect


def test_collects_in_order_with_tasks_and_seeds(guess_env, counting_agent):
    tasks = [{"id": "t2", "metadata": {"target": 2}}, {"id": "t4", "metadata": {"target": 4}}]
    out = collect(guess_env, counting_agent(), n_episodes=3, tasks=tasks, seed=10, progress=False)
    assert [t.task.id for t in out] == ["t2", "t4", "t2"]
    assert [len(t.steps) for t in out] == [2, 4, 2]
    assert [t.metadata["seed"] for t in out] == [10, 11, 12]
    assert all(t.outcome.success for t in out)
    assert out[0].steps[0].thought == "after guess a number; seed=10"
    assert all(env.closed for env in guess_env.instances) and len(guess_env.instances) == 3


def test_max_steps_truncates(guess_env, counting_agent):
    (t,) = collect(guess_env, counting_agent(), tasks=[{"metadata": {"target": 99}}], max_steps=5, progress=False)
    assert len(t.steps) == 5 and t.outcome.truncated and t.outcome.exit_status == "max_steps"


def test_registry_ids_and_env_kwargs(guess_env, counting_agent):
    register("hubtest/guess", guess_env)
    try:
        (t,) = collect("hubtest/guess", counting_agent(), env_kwargs={"default": 1}, progress=False)
    finally:
        unregister("hubtest/guess")
    assert len(t.steps) == 1 and t.source == "env:hubtest/guess"


def test_concurrent_episodes_use_fresh_agents(guess_env, counting_agent):
    made = []

    def factory():
        made.append(counting_agent())
        return made[-1]

    out = collect(
        guess_env,
        agent_factory=factory,
        n_episodes=6,
        concurrency=3,
        tasks=[{"metadata": {"target": k}} for k in (1, 2, 3)],
        progress=False,
    )
    assert [len(t.steps) for t in out] == [1, 2, 3, 1, 2, 3]
    assert len(made) == 6


def test_stateful_agent_cannot_be_shared_across_threads(guess_env, counting_agent):
    with pytest.raises(ValueError, match="agent_factory"):
        collect(guess_env, counting_agent(), n_episodes=2, concurrency=2, progress=False)


def test_reward_fn_and_output_path(guess_env, counting_agent, tmp_path):
    out_path = tmp_path / "run.jsonl"
    out = collect(
        guess_env,
        counting_agent(),
        n_episodes=2,
        reward_fn=lambda a, ts, h: -len(h),
        output_path=out_path,
        progress=False,
    )
    assert out[0].step_rewards == [0.0, -1.0, -2.0]
    assert [t.id for t in read_trajectories(out_path)] == [t.id for t in out]


def test_errors_propagate_and_envs_close(guess_env):
    with pytest.raises(KeyError):
        collect(guess_env, lambda obs: {"tool": "guess", "params": {}}, progress=False)
    assert guess_env.instances[0].closed


def test_argument_checks(guess_env, counting_agent):
    with pytest.raises(ValueError, match="needs an agent"):
        collect(guess_env)
    with pytest.raises(ValueError, match=">= 1"):
        collect(guess_env, counting_agent(), n_episodes=0)
    with pytest.raises(TypeError, match="not an AgentEnv"):
        collect(lambda: "env", counting_agent(), progress=False)


def test_an_empty_task_list_is_an_error_not_the_default_task(guess_env, counting_agent):
    """Before: ``tasks=[]`` (say, a split filtered down to nothing) ran task-less episodes."""
    for empty in ([], (), iter([])):
        with pytest.raises(ValueError, match="empty task list"):
            collect(guess_env, counting_agent(), tasks=empty, progress=False)
    assert guess_env.instances == []  # refused before any environment was built
    (t,) = collect(guess_env, counting_agent(), progress=False)  # tasks=None: the env's own default
    assert t.task.id == "" and len(t.steps) == 3  # GuessEnv's default target


def test_record_env_errors_ends_only_the_episode_whose_env_raised(guess_env, counting_agent):
    class NoNumberOnTask1(counting_agent):  # forgets "n" on target 1: GuessEnv raises KeyError
        def reset(self, task=None):
            super().reset()
            self.broken = task is not None and task.metadata["target"] == 1

        def __call__(self, observation):
            action = super().__call__(observation)
            return {"tool": "guess", "params": {}} if self.broken else action

    tasks = [{"id": f"t{n}", "metadata": {"target": n}} for n in (2, 1, 3)]
    for concurrency in (1, 3):
        out = collect(
            guess_env,
            agent_factory=NoNumberOnTask1,
            n_episodes=3,
            tasks=tasks,
            concurrency=concurrency,
            record_env_errors=True,
            progress=False,
        )
        assert [t.outcome.success for t in out] == [True, False, True]
        assert out[1].outcome.exit_status == "env_error" and out[1].metadata["env_error"] == "KeyError: 'n'"
        assert out[1].reward == 0.0 and [s.tool_call.parameters for s in out[1].steps] == [{}]
    assert all(env.closed for env in guess_env.instances)
