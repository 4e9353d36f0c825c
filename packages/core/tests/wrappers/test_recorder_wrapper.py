import json

import pytest

from knowlyrcore import TaskInfo, Trajectory, read_trajectories
from knowlyrcore.wrappers import MaxStepsWrapper, RecorderWrapper

INC = {"tool": "inc", "params": {"by": 1}, "thought": "one more"}
SUBMIT = {"tool": "submit", "params": {}}


def run_episode(env, actions, task="count to two"):
    ts = env.reset(task=task)
    for action in actions:
        ts = env.step(action)
        if ts.done:
            break
    return ts


def test_records_steps_thoughts_observations_and_rewards(counter_env):
    env = RecorderWrapper(counter_env, agent_name="tester", model_name="m-1")
    run_episode(env, [INC, INC, SUBMIT])
    t = env.get_trajectory()
    assert t.agent == "tester" and t.model == "m-1"
    assert t.task.description == "count to two"
    assert t.tool_names == ["inc", "inc", "submit"]
    assert t.steps[0].thought == "one more"
    assert t.steps[0].tool_call.parameters == {"by": 1}
    assert t.steps[1].observation.output == "count=2"
    assert t.steps[0].observation.exit_code == 0
    assert t.step_rewards == pytest.approx([0.1, 0.1, 1.0])
    assert t.reward == pytest.approx(1.2)
    assert all(s.duration_s is not None and s.duration_s >= 0 for s in t.steps)


def test_outcome_comes_from_final_info(counter_env):
    env = RecorderWrapper(counter_env)
    run_episode(env, [INC, INC, SUBMIT])
    outcome = env.get_trajectory().outcome
    assert outcome.success is True and outcome.score == 1.0
    assert outcome.terminated and not outcome.truncated
    assert outcome.exit_status == "terminated"


def test_truncated_episode_says_why(counter_env):
    env = RecorderWrapper(MaxStepsWrapper(counter_env, max_steps=2))
    run_episode(env, [INC, INC, INC])
    t = env.get_trajectory()
    assert len(t.steps) == 2
    assert t.outcome.truncated and t.outcome.exit_status == "max_steps"
    assert t.outcome.success is None


def test_task_dict_is_kept(counter_env):
    env = RecorderWrapper(counter_env)
    run_episode(env, [SUBMIT], task={"task_id": "t-9", "description": "d", "difficulty": "easy"})
    task = env.get_trajectory().task
    assert task == TaskInfo(id="t-9", description="d", metadata={"difficulty": "easy"})


def test_reachable_through_outer_wrappers(counter_env):
    env = MaxStepsWrapper(RecorderWrapper(counter_env), max_steps=5)
    run_episode(env, [SUBMIT])
    assert env.get_trajectory().tool_names == ["submit"]


def test_output_path_appends_each_episode(counter_env, tmp_path):
    out = tmp_path / "runs" / "traj.jsonl"
    finished = []
    env = RecorderWrapper(counter_env, output_path=out, on_episode_end=finished.append)
    run_episode(env, [INC, SUBMIT])
    run_episode(env, [SUBMIT])
    stored = list(read_trajectories(out))
    assert [len(t.steps) for t in stored] == [2, 1]
    assert stored == finished == env.episodes
    assert stored[0].id != stored[1].id


def test_trajectory_round_trips_through_json(counter_env):
    env = RecorderWrapper(counter_env)
    run_episode(env, [INC, SUBMIT])
    t = env.get_trajectory()
    assert Trajectory.model_validate(json.loads(t.model_dump_json())) == t


def test_get_trajectory_before_reset_is_an_error(counter_env):
    with pytest.raises(RuntimeError, match="reset"):
        RecorderWrapper(counter_env).get_trajectory()
