"""knowlyr → ATIF / ADP → knowlyr keeps every field; what is written is valid ATIF.

The readers add their own bookkeeping (``metadata.format`` names the format read,
``metadata.atif`` / step ``metadata.atif`` the ATIF fields knowlyr has no place for); those
are left out of the comparison, everything else must be equal.
"""

from __future__ import annotations

import copy
import json

import pytest

from agentrecorder import convert_file, convert_record, expand_inputs, get_adapter
from agentrecorder.atif_validation import validate_atif
from agentrecorder.cli import main
from agentrecorder.interop import to_adp, to_atif
from knowlyrcore.jsonl import read_trajectories, write_trajectories
from knowlyrcore.models import TaskInfo
from knowlyrcore.trajectory import Observation, Outcome, Step, TestSummary, ToolCall, Trajectory, Usage

READER_KEYS = ("format", "atif")


def comparable(t: Trajectory) -> dict:
    data = t.model_dump(mode="json")
    for key in READER_KEYS:
        data["metadata"].pop(key, None)
    for step in data["steps"]:
        step["metadata"].pop("atif", None)
    return data


def read_back(doc: dict, fmt: str) -> Trajectory:
    (back,) = convert_record(get_adapter(fmt), json.loads(json.dumps(doc)), path=f"<{fmt}>")
    return back


def rollout() -> Trajectory:
    """What online GRPO records: sampled token ids and log-probs per step, the observation tokens
    after each, the first prompt's ids; plus everything else a trajectory can carry."""
    steps = [
        Step(
            index=0,
            thought="look around first",
            tool_call=ToolCall(name="bash", parameters={"command": "ls -la"}, id="call_a"),
            observation=Observation(output="a.py\nb.py", exit_code=0),
            reward=0.25,
            rubric_scores={"goal_progress": 0.5, "tool_choice": 1.0},
            timestamp=1737405000.123456789,  # more digits than an ISO timestamp keeps
            duration_s=0.75,
            token_ids=[151644, 77091, 198, 5765],
            logprobs=[-0.0123, -1.5, -0.000001, -2.25],
            metadata={"observation_token_ids": [151645, 198], "format_error": False},
        ),
        Step(
            index=1,
            tool_call=ToolCall(name="edit_file", parameters={"path": "a.py", "old_str": "x", "new_str": "y"}),
            observation=Observation(output="", error="no match for old_str", exit_code=1),
            token_ids=[11, 12],
            logprobs=[-0.5, -0.25],
        ),
        Step(
            index=2,
            thought="tell the user",
            tool_call=ToolCall(name="respond", parameters={"message": "done: a.py edited"}),
            observation=Observation(output="thanks"),
            token_ids=[13],
            logprobs=[-0.125],
        ),
        Step(
            index=3,
            tool_call=ToolCall(
                name="execute_code", parameters={"code_blocks": [{"language": "python", "code": "1+1"}]}
            ),
            observation=Observation(output="2"),
        ),
        Step(index=4, tool_call=ToolCall(name="submit", parameters={}, id="call_z")),
    ]
    return Trajectory(
        id="rollout-7",
        task=TaskInfo(id="task-3", description="fix a.py", domain="coding", test_command="pytest -q", max_steps=20),
        agent="knowlyr-grpo",
        model="smollm2-135m",
        steps=steps,
        outcome=Outcome(success=False, score=0.4, tests=TestSummary(passed=3, failed=1), exit_status="submitted"),
        reward=0.61,
        usage=Usage(prompt_tokens=900, completion_tokens=8, total_tokens=908, api_calls=4),
        source="env:knowlyr/coding",
        metadata={"prompt_token_ids": [1, 2, 3], "finish": "submit", "group": 2},
    )


@pytest.mark.parametrize("fmt", ["atif", "adp"])
def test_rollout_round_trip_keeps_every_field(fmt):
    original = rollout()
    doc = to_atif(original) if fmt == "atif" else to_adp(original)
    back = read_back(doc, fmt)
    assert comparable(back) == comparable(original)
    assert back.steps[0].token_ids == [151644, 77091, 198, 5765]
    assert back.steps[0].logprobs == [-0.0123, -1.5, -0.000001, -2.25]
    assert back.steps[0].timestamp == 1737405000.123456789
    assert back.steps[1].tool_call.id is None and back.steps[1].observation.error == "no match for old_str"


def test_rollout_as_atif_puts_the_sampled_tokens_in_the_metrics():
    doc = to_atif(rollout())
    assert validate_atif(doc) == []
    assert [s["source"] for s in doc["steps"]] == ["user", "agent", "agent", "agent", "agent", "agent"]
    first = doc["steps"][1]
    assert first["message"] == "look around first"
    assert first["tool_calls"] == [
        {"tool_call_id": "call_a", "function_name": "bash", "arguments": {"command": "ls -la"}}
    ]
    assert first["observation"] == {"results": [{"source_call_id": "call_a", "content": "a.py\nb.py"}]}
    assert first["metrics"] == {
        "completion_token_ids": [151644, 77091, 198, 5765],
        "logprobs": [-0.0123, -1.5, -0.000001, -2.25],
    }
    assert first["timestamp"].startswith("2025-01-20T20:30:00.12345")
    reply = doc["steps"][3]  # a respond step: an agent message, no tool call
    assert reply["message"] == "done: a.py edited" and "tool_calls" not in reply
    assert reply["observation"] == {"results": [{"content": "thanks"}]}
    assert doc["final_metrics"] == {"total_prompt_tokens": 900, "total_completion_tokens": 8}
    assert doc["agent"]["name"] == "knowlyr-grpo" and doc["agent"]["model_name"] == "smollm2-135m"


def test_rollout_as_adp_uses_the_adp_action_classes():
    doc = to_adp(rollout())
    classes = [(item["class_"], item.get("function") or item.get("language")) for item in doc["content"]]
    assert classes == [
        ("text_observation", None),
        ("code_action", "bash"),
        ("text_observation", None),
        ("api_action", "edit_file"),
        ("message_action", None),
        ("text_observation", None),
        ("code_action", "python"),
        ("text_observation", None),
        ("api_action", "submit"),
    ]
    assert doc["content"][5] == {"class_": "text_observation", "content": "thanks", "name": None, "source": "user"}
    assert doc["content"][2]["source"] == "environment"
    assert doc["id"] == "rollout-7" and doc["details"]["model_name"] == "smollm2-135m"


def test_every_real_trajectory_round_trips(real):
    """All 57 trajectories of shared/data/real (agent logs and the interop samples) through both."""
    trajectories = [t for path in expand_inputs([real("interop").parent]) for t in convert_file(path)]
    assert len(trajectories) == 57
    for original in trajectories:
        doc = to_atif(original)
        assert validate_atif(json.loads(json.dumps(doc))) == [], original.source
        assert comparable(read_back(doc, "atif")) == comparable(original), original.source
        assert comparable(read_back(to_adp(original), "adp")) == comparable(original), original.source


@pytest.mark.parametrize("name", ["atif_terminus2_context-summarization.json", "atif_terminus2_invalid-json.json"])
def test_atif_to_knowlyr_to_atif_gives_the_document_back(real, real_json, name):
    """Only two things change: results get the source_call_id of the call they were matched to,
    and extra.knowlyr is added."""
    original = real_json(f"interop/{name}")
    (t,) = convert_file(real(f"interop/{name}"))
    written = to_atif(t)
    assert written["extra"].pop("knowlyr")["id"] == "NORMALIZED_SESSION_ID"
    assert written.pop("extra") == {}
    expected = copy.deepcopy(original)
    for step in expected["steps"]:
        calls = step.get("tool_calls") or []
        for result, call in zip(step.get("observation", {}).get("results", []), calls):
            result["source_call_id"] = call["tool_call_id"]
    assert written == expected


def test_export_cli_round_trip(real, tmp_path, capsys):
    source = [t for t in convert_file(real("tau-bench_gpt-4o-airline_tasks0-4.json"))]
    trajectories = tmp_path / "t.jsonl"
    write_trajectories(trajectories, [*source, rollout()])
    for target, suffix in (("atif", ".jsonl"), ("atif", ".json"), ("adp", ".json"), ("adp", ".jsonl")):
        out = tmp_path / f"{target}{suffix}"
        assert main(["export", "--to", target, str(trajectories), "-o", str(out)]) == 0
        assert f"wrote {len(source) + 1} {target.upper()} documents to {out}" in capsys.readouterr().err
        back_file = tmp_path / f"back-{target}{suffix}.jsonl"
        assert main(["convert", str(out), "-o", str(back_file), "-q"]) == 0
        back = list(read_trajectories(back_file))
        assert [comparable(t) for t in back] == [comparable(t) for t in read_trajectories(trajectories)]
        assert all(t.metadata["format"] == target for t in back)
    assert main(["validate", str(tmp_path / "atif.json")]) == 0
    assert f"ok as atif log (valid ATIF), {len(source) + 1} trajectories" in capsys.readouterr().out


def test_one_trajectory_exports_as_one_atif_document(real, tmp_path):
    out = tmp_path / "trajectory.json"
    assert main(["export", "--to", "atif", str(real("swe-agent_test-repo-i1.traj")), "-o", str(out), "-q"]) == 0
    doc = json.loads(out.read_text())
    assert isinstance(doc, dict) and doc["schema_version"] == "ATIF-v1.5"
    assert [c["function_name"] for s in doc["steps"] for c in s.get("tool_calls", [])] == [
        "find_file",
        "open",
        "edit",
        "bash",
        "submit",
    ]


def test_a_turn_with_two_tool_calls_links_results_by_id_and_is_written_as_one_step():
    doc = {
        "schema_version": "ATIF-v1.5",
        "session_id": "two-calls",
        "agent": {"name": "harbor-agent", "version": "1.0.0", "model_name": "m-1"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "price and volume of ACME?"},
            {
                "step_id": 2,
                "source": "agent",
                "timestamp": "2025-10-11T10:30:02Z",
                "message": "two lookups",
                "reasoning_content": "both at once",
                "tool_calls": [
                    {"tool_call_id": "p", "function_name": "quote", "arguments": {"ticker": "ACME", "metric": "price"}},
                    {
                        "tool_call_id": "v",
                        "function_name": "quote",
                        "arguments": {"ticker": "ACME", "metric": "volume"},
                    },
                ],
                # results in the other order: they are matched by source_call_id, not position
                "observation": {
                    "results": [{"source_call_id": "v", "content": "1.5M"}, {"source_call_id": "p", "content": "$12"}]
                },
                "metrics": {
                    "prompt_tokens": 52,
                    "completion_tokens": 3,
                    "completion_token_ids": [7, 8, 9],
                    "logprobs": [-0.5, -0.25, -0.125],
                },
            },
            {"step_id": 3, "source": "agent", "message": "ACME: $12, 1.5M traded"},
        ],
    }
    assert validate_atif(doc) == []
    t = read_back(doc, "atif")
    assert t.tool_names == ["quote", "quote", "respond"]
    assert [s.observation.output for s in t.steps] == ["$12", "1.5M", ""]
    assert t.steps[0].token_ids == [7, 8, 9] and t.steps[1].token_ids is None
    assert t.steps[0].thought == "two lookups" and t.steps[1].thought == ""
    assert t.steps[0].timestamp == t.steps[1].timestamp == 1760178602.0
    assert t.steps[0].metadata["reasoning_content"] == "both at once"
    assert t.steps[2].tool_call.parameters == {"message": "ACME: $12, 1.5M traded"}
    assert t.usage.prompt_tokens == 52 and t.usage.api_calls == 2  # no final_metrics: the step sums

    written = to_atif(t)
    assert validate_atif(written) == []
    turn = written["steps"][1]
    assert [c["tool_call_id"] for c in turn["tool_calls"]] == ["p", "v"]
    assert turn["observation"]["results"] == [
        {"source_call_id": "p", "content": "$12"},
        {"source_call_id": "v", "content": "1.5M"},
    ]
    assert turn["metrics"]["completion_token_ids"] == [7, 8, 9] and turn["timestamp"] == "2025-10-11T10:30:02Z"
    assert [s["source"] for s in written["steps"]] == ["user", "agent", "agent"]
    assert comparable(read_back(written, "atif")) == comparable(t)


def test_results_without_call_ids_go_to_the_calls_in_order():
    doc = {
        "schema_version": "ATIF-v1.6",
        "session_id": "s",
        "agent": {"name": "a", "version": "1"},
        "steps": [
            {
                "step_id": 1,
                "source": "agent",
                "message": "",
                "tool_calls": [
                    {"tool_call_id": "a", "function_name": "ls", "arguments": {}},
                    {"tool_call_id": "b", "function_name": "pwd", "arguments": {}},
                ],
                "observation": {"results": [{"content": "x.py"}, {"content": "/work"}, {"content": "(done)"}]},
            }
        ],
    }
    t = read_back(doc, "atif")
    assert [s.observation.output for s in t.steps] == ["x.py", "/work\n(done)"]  # the surplus joins the last call
    assert t.task.description == ""
