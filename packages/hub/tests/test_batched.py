"""collect_batched: lockstep episodes give collect()'s trajectories; ended episodes see None; envs always close."""

import doctest
import importlib

import pytest

from knowlyrcore import TaskInfo, read_trajectories, register, unregister
from trajectoryhub import collect, collect_batched, run_episode

TARGETS = [2, 4, 1, 3, 5]


def guess_tasks(targets):
    return [{"id": f"t{k}", "metadata": {"target": n}} for k, n in enumerate(targets)]


def comparable(trajectory):
    """A trajectory without what differs between two identical runs: its id and wall-clock times."""
    data = trajectory.model_dump()
    del data["id"], data["metadata"]["started_at"]
    for step in data["steps"]:
        del step["timestamp"], step["duration_s"]
    return data


class CountingBatch:
    """A BatchPolicy guessing 1, 2, 3, ... in every episode; records what it was given."""

    def __init__(self, fail_on_turn=None, drop_actions=False):
        self.fail_on_turn = fail_on_turn
        self.drop_actions = drop_actions
        self.resets, self.turns = [], []

    def reset_batch(self, tasks):
        self.resets.append(list(tasks))
        self.counts = [0] * len(tasks)

    def act_batch(self, observations):
        self.turns.append(list(observations))
        if len(self.turns) == self.fail_on_turn:
            raise RuntimeError("model crashed")
        if self.drop_actions:
            return [None] * len(observations)
        actions = []
        for i, observation in enumerate(observations):
            if observation is None:
                actions.append(None)
                continue
            self.counts[i] += 1
            actions.append({"tool": "guess", "params": {"n": self.counts[i]}})
        return actions


def test_equals_collect_with_the_same_per_episode_agents(guess_env, counting_agent):
    tasks = guess_tasks(TARGETS)
    options = dict(seed=10, reward_fn=lambda action, ts, history: -len(history), progress=False)
    expected = collect(guess_env, agent_factory=counting_agent, n_episodes=len(tasks), tasks=tasks, **options)
    batched = collect_batched(guess_env, counting_agent, tasks, batch_size=2, **options)
    assert [len(t.steps) for t in batched] == TARGETS
    assert [t.metadata["seed"] for t in batched] == [10, 11, 12, 13, 14]
    assert [comparable(t) for t in batched] == [comparable(t) for t in expected]


def test_ended_episodes_get_none_until_the_last_one_ends(guess_env):
    policy = CountingBatch()
    out = collect_batched(guess_env, policy, guess_tasks([1, 3, 2]), progress=False)
    assert [len(t.steps) for t in out] == [1, 3, 2]
    first = "guess a number; seed=None"
    assert policy.turns == [[first, first, first], [None, "higher", "higher"], [None, "higher", None]]
    (tasks,) = policy.resets
    assert all(isinstance(t, TaskInfo) for t in tasks) and [t.id for t in tasks] == ["t0", "t1", "t2"]


def test_chunks_of_batch_size_keep_task_order(guess_env):
    policy = CountingBatch()
    out = collect_batched(guess_env, policy, guess_tasks(TARGETS), batch_size=2, progress=False)
    assert [t.task.id for t in out] == ["t0", "t1", "t2", "t3", "t4"]
    assert [[t.id for t in tasks] for tasks in policy.resets] == [["t0", "t1"], ["t2", "t3"], ["t4"]]
    assert max(len(turn) for turn in policy.turns) == 2
    assert all(env.closed for env in guess_env.instances) and len(guess_env.instances) == 5


def test_max_steps_truncates_every_episode(guess_env):
    policy = CountingBatch()
    out = collect_batched(guess_env, policy, guess_tasks([99, 1, 99]), max_steps=4, progress=False)
    assert [len(t.steps) for t in out] == [4, 1, 4]
    assert [t.outcome.exit_status for t in out] == ["max_steps", "terminated", "max_steps"]
    assert out[0].outcome.truncated and not out[1].outcome.truncated
    assert len(policy.turns) == 4


def test_envs_close_when_the_policy_raises(guess_env):
    with pytest.raises(RuntimeError, match="model crashed"):
        collect_batched(guess_env, CountingBatch(fail_on_turn=2), guess_tasks([3, 3, 3]), progress=False)
    assert len(guess_env.instances) == 3 and all(env.closed for env in guess_env.instances)


def test_envs_close_when_a_step_raises(guess_env):
    def agent():
        return lambda observation: {"tool": "guess", "params": {}}  # no "n": the env raises KeyError

    with pytest.raises(KeyError):
        collect_batched(guess_env, agent, guess_tasks([3, 3]), progress=False)
    assert len(guess_env.instances) == 2 and all(env.closed for env in guess_env.instances)


def test_envs_built_so_far_close_when_building_one_fails(guess_env):
    def factory():
        if len(guess_env.instances) == 2:
            raise OSError("no more sandboxes")
        return guess_env()

    with pytest.raises(OSError, match="no more sandboxes"):
        collect_batched(factory, CountingBatch(), guess_tasks([3, 3, 3]), progress=False)
    assert len(guess_env.instances) == 2 and all(env.closed for env in guess_env.instances)


def test_a_policy_must_act_for_every_live_episode(guess_env):
    with pytest.raises(ValueError, match="no action for live episode 0"):
        collect_batched(guess_env, CountingBatch(drop_actions=True), guess_tasks([3]), progress=False)

    class Short(CountingBatch):
        def act_batch(self, observations):
            return super().act_batch(observations)[:-1]

    with pytest.raises(ValueError, match="1 actions for 2 episodes"):
        collect_batched(guess_env, Short(), guess_tasks([3, 3]), progress=False)
    assert all(env.closed for env in guess_env.instances)


def test_registry_ids_env_kwargs_and_output_path(guess_env, tmp_path):
    register("hubtest/guess-batched", guess_env)
    out_path = tmp_path / "run.jsonl"
    try:
        out = collect_batched(
            "hubtest/guess-batched",
            CountingBatch(),
            [{}, {}, {}],
            env_kwargs={"default": 2},
            batch_size=2,
            output_path=out_path,
            progress=False,
        )
    finally:
        unregister("hubtest/guess-batched")
    assert [len(t.steps) for t in out] == [2, 2, 2] and out[0].source == "env:hubtest/guess-batched"
    assert [t.id for t in read_trajectories(out_path)] == [t.id for t in out]


def test_finished_chunks_are_kept_when_a_later_chunk_fails(guess_env, tmp_path):
    out_path = tmp_path / "run.jsonl"
    with pytest.raises(RuntimeError, match="model crashed"):
        # turn 1 is chunk 1's only turn (target 1); turn 2 is chunk 2's first
        collect_batched(
            guess_env,
            CountingBatch(fail_on_turn=2),
            guess_tasks([1, 1]),
            batch_size=1,
            output_path=out_path,
            progress=False,
        )
    assert [t.task.id for t in read_trajectories(out_path)] == ["t0"]


def test_progress_bar_counts_episodes(guess_env, capsys):
    collect_batched(guess_env, CountingBatch(), guess_tasks(TARGETS), batch_size=3)
    assert "5/5" in capsys.readouterr().err


def test_progress_bar_shows_turns_and_live_episodes(guess_env, capsys):
    """Before: the bar sat at 0/N for every turn until the first episode ended; now each turn
    shows which turn is played and how many episodes are live and finished."""
    collect_batched(guess_env, CountingBatch(), guess_tasks([1, 3, 2]), max_steps=5)
    err = capsys.readouterr().err
    shown = ["turn 1/5, 3 live, 0 finished", "turn 2/5, 2 live, 1 finished", "turn 3/5, 1 live, 2 finished"]
    assert [err.index(text) for text in shown] == sorted(err.index(text) for text in shown)
    assert "turn 4/5" not in err and "3/3" in err
    collect_batched(guess_env, CountingBatch(), guess_tasks([1, 3, 2]), max_steps=5, batch_size=2)
    err = capsys.readouterr().err
    assert "chunk 1/2, turn 3/5, 1 live, 1 finished" in err and "chunk 2/2, turn 2/5, 1 live, 2 finished" in err


def test_argument_checks(guess_env):
    with pytest.raises(ValueError, match="at least one task"):
        collect_batched(guess_env, CountingBatch(), [], progress=False)
    with pytest.raises(ValueError, match=">= 1"):
        collect_batched(guess_env, CountingBatch(), [{}], batch_size=0, progress=False)
    with pytest.raises(TypeError, match="BatchPolicy or a policy factory"):
        collect_batched(guess_env, 42, [{}], progress=False)


def test_run_episode_gives_the_agent_its_task(guess_env, counting_agent):
    class TaskAware(counting_agent):
        def reset(self, task=None):
            super().reset()
            self.task = task

    agent = TaskAware()
    trajectory = run_episode(guess_env(), agent, task=TaskInfo(id="t7", metadata={"target": 2}))
    assert isinstance(agent.task, TaskInfo) and agent.task.id == "t7" and len(trajectory.steps) == 2
    old_style = counting_agent()  # reset(self) without a task still works
    run_episode(guess_env(), old_style, task="guess")
    assert old_style.resets == 1


def test_module_example():
    result = doctest.testmod(importlib.import_module("trajectoryhub.batched"))
    assert result.attempted >= 3 and result.failed == 0
