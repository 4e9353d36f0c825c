import math

import pytest
from pydantic import ValidationError

from knowlyrcore import SCHEMA_VERSION, Observation, Outcome, Step, TestSummary, ToolCall, Trajectory, Usage


def make_step(index, **kwargs):
    return Step(index=index, tool_call=ToolCall(name="bash", parameters={"command": "ls"}), **kwargs)


def full_trajectory():
    return Trajectory(
        id="t-1",
        task={"id": "task-1", "description": "fix", "domain": "coding", "repo": "/r", "test_command": "pytest"},
        agent="swe-agent",
        model="gpt-4o",
        steps=[
            make_step(
                0,
                thought="look",
                observation=Observation(output="a.py", exit_code=0),
                reward=0.5,
                rubric_scores={"goal_progress": 0.4},
                timestamp=1.5,
                duration_s=0.2,
                token_ids=[1, 2],
                logprobs=[-0.1, -0.2],
                metadata={"k": "v"},
            ),
            make_step(1, observation=Observation(output="", error="boom")),
        ],
        outcome=Outcome(
            success=True,
            score=1.0,
            tests=TestSummary(passed=3, failed=0),
            exit_status="submitted",
            patch="diff --git",
            terminated=True,
        ),
        reward=0.75,
        usage=Usage(prompt_tokens=10, completion_tokens=5, total_tokens=15, cost_usd=0.01, api_calls=2),
        source="swe-agent:x.traj",
        metadata={"instance": "x"},
    )


def test_round_trip_is_lossless():
    t = full_trajectory()
    assert Trajectory.model_validate_json(t.model_dump_json()) == t


def test_schema_version_is_written_and_checked():
    assert Trajectory().schema_version == SCHEMA_VERSION
    assert Trajectory(schema_version="1.7").schema_version == "1.7"
    with pytest.raises(ValidationError, match="unsupported version '2.0'"):
        Trajectory(schema_version="2.0")


def test_steps_must_be_in_order():
    with pytest.raises(ValidationError, match=r"steps\[1\].index is 5"):
        Trajectory(steps=[make_step(0), make_step(5)])


def test_unknown_fields_are_errors_not_silently_dropped():
    with pytest.raises(ValidationError, match="Extra inputs"):
        Trajectory.model_validate({"stepz": []})
    with pytest.raises(ValidationError):
        Step.model_validate({"index": 0, "tool_call": {"name": "x", "params": {}}})


def test_tool_name_required():
    with pytest.raises(ValidationError):
        ToolCall(name="")


def test_reward_must_be_finite():
    with pytest.raises(ValidationError, match="finite"):
        make_step(0, reward=math.inf)


def test_token_ids_and_logprobs_align():
    with pytest.raises(ValidationError, match="same length"):
        make_step(0, token_ids=[1, 2, 3], logprobs=[-0.1])


def test_helpers():
    t = full_trajectory()
    assert t.tool_names == ["bash", "bash"]
    assert t.step_rewards == [0.5, None]


def test_json_schema_documents_fields():
    schema = Trajectory.model_json_schema()
    assert {"task", "steps", "outcome", "schema_version"} <= set(schema["properties"])
    assert "Step" in schema["$defs"]
