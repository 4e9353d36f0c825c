"""The policy protocol: reset_policy's signature handling, batching, and the chat transcript."""

from __future__ import annotations

import pytest

from knowlyrcore import BatchPolicy, ChatTranscript, Policy, TaskInfo, as_batch_policy, reset_policy


class Counting:
    def __init__(self):
        self.tasks, self.turns = [], 0

    def reset(self, task=None):
        self.tasks.append(task)
        self.turns = 0

    def __call__(self, observation):
        self.turns += 1
        return {"tool": "note", "params": {"turn": self.turns, "saw": observation}}


def test_reset_policy_passes_the_task_to_any_reset_that_takes_one():
    task = TaskInfo(description="t")
    calls = []

    class Keyword:
        def reset(self, *, task=None):
            calls.append(("keyword", task))

    class Positional:
        def reset(self, episode_task):
            calls.append(("positional", episode_task))

    class Old:
        def reset(self):
            calls.append(("none", None))

    for policy in (Keyword(), Positional(), Old(), object()):
        reset_policy(policy, task)
    assert calls == [("keyword", task), ("positional", task), ("none", None)]


def test_a_policy_and_a_batch_policy_are_recognised():
    assert isinstance(Counting(), Policy)
    assert not isinstance(object(), Policy)
    batch = as_batch_policy(Counting)
    assert isinstance(batch, BatchPolicy) and as_batch_policy(batch) is batch


def test_sequential_batch_gives_each_episode_its_own_policy():
    batch = as_batch_policy(Counting)
    batch.reset_batch(["a", "b"])
    assert [p.tasks for p in batch.policies] == [["a"], ["b"]]
    batch.act_batch(["x", "y"])
    actions = batch.act_batch(["x2", None])
    assert actions == [{"tool": "note", "params": {"turn": 2, "saw": "x2"}}, None]
    with pytest.raises(ValueError, match="1 observations for 2 episodes"):
        batch.act_batch(["x"])
    with pytest.raises(TypeError, match="policy factory"):
        as_batch_policy(42)


def test_transcript_threads_native_calls_as_tool_messages_and_text_as_user_messages():
    transcript = ChatTranscript()
    transcript.add_observation("task")
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"'}}
    other = {**call, "id": "c2"}
    action = {"tool": "bash", "params": {}, "thought": "", "id": "c1", "format_error": "..."}
    transcript.add_reply({"content": "look", "tool_calls": [call, other]}, action)
    transcript.add_observation("error: bad arguments")
    transcript.add_reply({"content": "sorry"}, {"tool": "respond", "params": {"message": "sorry"}})
    transcript.add_observation({"reply": "ok"})
    assert transcript.messages == [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "look", "tool_calls": [call]},  # only the executed call, raw arguments
        {"role": "tool", "tool_call_id": "c1", "content": "error: bad arguments"},
        {"role": "assistant", "content": "sorry"},
        {"role": "user", "content": '{"reply": "ok"}'},
    ]
    transcript.reset()
    assert transcript.messages == [] and transcript.pending_call_id is None


def test_transcript_renders_arguments_of_a_legacy_function_call():
    transcript = ChatTranscript("sys")
    transcript.add_reply({"content": None}, {"tool": "ls", "params": {"path": "é"}, "id": "call_0"})
    assert transcript.messages[-1]["tool_calls"][0]["function"] == {"name": "ls", "arguments": '{"path": "é"}'}
    assert transcript.pending_call_id == "call_0"
