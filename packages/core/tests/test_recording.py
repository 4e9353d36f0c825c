import pytest

from knowlyrcore import InvalidActionError, TrajectoryBuilder
from knowlyrcore.recording import observation_text


def test_builds_a_valid_trajectory():
    b = TrajectoryBuilder({"id": "t", "description": "d"}, agent="a", model="m", source="live")
    b.add_step(
        {"tool": "bash", "params": {"command": "ls"}, "thought": "look", "id": "call_1"},
        "a.py",
        exit_code=0,
        duration_s=0.1,
    )
    b.add_step({"tool": "submit"}, {"ok": True}, reward=1.0)
    t = b.finish(success=True, tests={"passed": 2}, usage={"total_tokens": 30}, exit_status="submitted")
    assert [s.index for s in t.steps] == [0, 1]
    assert t.steps[0].tool_call.id == "call_1"
    assert t.steps[1].observation.output == '{"ok": true}'
    assert t.outcome.tests.passed == 2 and t.usage.total_tokens == 30
    assert t.source == "live" and "started_at" in t.metadata


def test_explicit_thought_wins():
    b = TrajectoryBuilder()
    step = b.add_step({"tool": "x", "thought": "from action"}, thought="explicit")
    assert step.thought == "explicit"


def test_malformed_action_is_rejected():
    with pytest.raises(InvalidActionError):
        TrajectoryBuilder().add_step({"params": {}})


def test_observation_text():
    assert observation_text("plain") == "plain"
    assert observation_text([1, "é"]) == '[1, "é"]'
    assert observation_text(object()).startswith('"<object')


def test_a_malformed_call_keeps_the_parsers_verdict_in_step_metadata():
    builder = TrajectoryBuilder({"id": "t"})
    action = {"tool": "respond", "params": {}, "format_error": "<tool_call> block is not valid JSON"}
    step = builder.add_step(action, "Conversation ended.")
    assert step.metadata["format_error"] == "<tool_call> block is not valid JSON"
    assert "format_error" not in builder.add_step({"tool": "ls", "params": {}}, "ok").metadata
