"""``Recorder``: live recording, atomic flushing, and core's ``RecorderWrapper`` feeding it."""

from __future__ import annotations

import json

import pytest

from agentrecorder import Recorder, convert_file
from knowlyrcore.env import AgentEnv
from knowlyrcore.jsonl import read_trajectories
from knowlyrcore.timestep import TimeStep
from knowlyrcore.wrappers import RecorderWrapper


class CounterEnv(AgentEnv):
    """A small real environment: `add` increments a counter, `submit` ends the episode."""

    domain = "generic"

    def reset(self, *, task=None, seed=None) -> TimeStep:
        self.total = 0
        return TimeStep(observation="total=0")

    def step(self, action: dict) -> TimeStep:
        if action["tool"] == "submit":
            return TimeStep(observation=f"submitted {self.total}", terminated=True, info={"success": self.total == 3})
        self.total += int(action["params"]["n"])
        return TimeStep(observation=f"total={self.total}", reward=0.5, info={"exit_code": 0})

    @property
    def available_tools(self):
        return ["add", "submit"]


def test_live_episode_is_written_atomically_and_appends(tmp_path):
    out = tmp_path / "live.jsonl"
    with Recorder(out, agent="live-agent", model="m1") as recorder:
        with recorder.episode({"id": "t1", "description": "count to 3"}) as episode:
            episode.step("add", {"n": 1}, "total=1", thought="start small", exit_code=0, duration_s=0.25)
            episode.step("add", {"n": 2}, "total=3")
            episode.finish(success=True, score=1.0, exit_status="submitted")
        assert not out.exists()  # nothing on disk until flushed
    (t,) = read_trajectories(out)
    assert (t.agent, t.model, t.task.id, t.task.description) == ("live-agent", "m1", "t1", "count to 3")
    assert t.tool_names == ["add", "add"]
    assert t.steps[0].tool_call.parameters == {"n": 1} and t.steps[0].thought == "start small"
    assert t.steps[0].observation.exit_code == 0 and t.steps[0].duration_s == 0.25
    assert t.outcome.success is True and t.outcome.terminated

    with Recorder(out) as recorder, recorder.episode("second") as episode:
        episode.step("add", {"n": 5}, "total=5")
    assert [t.task.description for t in read_trajectories(out)] == ["count to 3", "second"]
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary files left behind


def test_an_exception_ends_the_episode_as_truncated(tmp_path):
    out = tmp_path / "crash.jsonl"
    with pytest.raises(RuntimeError), Recorder(out) as recorder, recorder.episode("doomed") as episode:
        episode.step("add", {"n": 1}, "total=1")
        raise RuntimeError("model server went away")
    (t,) = read_trajectories(out)
    assert t.outcome.truncated and not t.outcome.terminated
    assert t.outcome.exit_status == "error: RuntimeError: model server went away"
    assert len(t.steps) == 1


def test_recorder_wrapper_hands_episodes_to_the_recorder(tmp_path):
    out = tmp_path / "env.jsonl"
    with Recorder(out) as recorder:
        env = RecorderWrapper(CounterEnv(), agent_name="scripted", on_episode_end=recorder.add)
        for total in (3, 2):
            env.reset(task=f"reach {total}")
            env.step({"tool": "add", "params": {"n": 1}})
            env.step({"tool": "add", "params": {"n": total - 1}})
            env.step({"tool": "submit", "params": {}})
        assert len(recorder.pending) == 2
    first, second = read_trajectories(out)
    assert first.tool_names == ["add", "add", "submit"]
    assert first.outcome.success is True and second.outcome.success is False
    assert first.steps[1].observation.output == "total=3" and first.steps[0].reward == 0.5


def test_live_episode_and_converted_log_give_the_same_steps(tmp_path):
    """The same interaction recorded live and converted from an OpenAI chat log."""
    log = tmp_path / "chat.json"
    log.write_text(
        json.dumps(
            [
                {"role": "user", "content": "count to 3"},
                {
                    "role": "assistant",
                    "content": "start small",
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "add", "arguments": '{"n": 1}'}}
                    ],
                },
                {"role": "tool", "tool_call_id": "a", "content": "total=1"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "b", "type": "function", "function": {"name": "add", "arguments": '{"n": 2}'}}
                    ],
                },
                {"role": "tool", "tool_call_id": "b", "content": "total=3"},
            ]
        )
    )
    (converted,) = convert_file(log)
    recorder = Recorder()
    with recorder.episode("count to 3") as episode:
        episode.step("add", {"n": 1}, "total=1", thought="start small", call_id="a")
        episode.step("add", {"n": 2}, "total=3", call_id="b")
    (live,) = recorder.pending

    def comparable(step):
        return step.model_dump(include={"index", "thought", "tool_call", "observation"})

    assert [comparable(s) for s in live.steps] == [comparable(s) for s in converted.steps]
    assert live.task.description == converted.task.description
    assert type(live) is type(converted)
