"""What real producers write beyond the published samples: newer ATIF and flattened OpenHands events.

The files in ``tests/data/variants`` are written to the shapes producers emit:

- ``atif-v1.6_message-objects.json``: ATIF-v1.6 whose step ``message`` is a chat message object
  ``{role, content, reasoning, tool_calls}`` (OpenAI-style calls with JSON-string arguments), a
  list of them (with the ``tool`` answer), or ATIF-v1.6 content parts (text and image), with
  fields this reader does not know at the root, the agent, the steps, the messages, the tool
  calls and the results;
- ``atif-v2.0.json``: another major version, refused in one line naming the file and the field;
- ``openhands_feedback-row_null-actions.json``: a row of the OpenHands feedback data set, whose
  events are flattened into one shape (``"action": null`` on observations, ``"observation":
  null`` on actions, ``extras`` as JSON text, no ``args`` or ``cause``) plus one event that is
  neither.

Each converts through the installed ``knowlyr-recorder`` and the Python API into trajectories
that knowlyr-core's schema accepts, and ATIF exported from it is valid and reads back the same.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from agentrecorder import convert_file, convert_record, get_adapter
from agentrecorder.atif_validation import validate_atif
from agentrecorder.errors import ConversionError
from agentrecorder.interop import to_atif
from agentrecorder.testing import AdapterConformance
from knowlyrcore.jsonl import read_trajectories
from knowlyrcore.testing import check_refusal
from knowlyrcore.trajectory import Trajectory

VARIANTS = Path(__file__).parent / "data" / "variants"
ATIF_V16 = VARIANTS / "atif-v1.6_message-objects.json"
ATIF_V2 = VARIANTS / "atif-v2.0.json"
OPENHANDS_ROW = VARIANTS / "openhands_feedback-row_null-actions.json"


def run(*args: str) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "knowlyr-recorder"  # the installed console script
    command = [str(script)] if script.exists() else [sys.executable, "-m", "agentrecorder.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)


def schema_valid(trajectories: list[Trajectory]) -> None:
    """Each trajectory passes knowlyr-core's JSON Schema (what ``knowlyr-core schema trajectory`` prints)."""
    validator = jsonschema.Draft202012Validator(Trajectory.model_json_schema())
    for t in trajectories:
        assert list(validator.iter_errors(t.model_dump(mode="json"))) == [], t.source


def comparable(t: Trajectory) -> dict:
    """The trajectory without the reader's own bookkeeping (as in test_interop_roundtrip)."""
    data = t.model_dump(mode="json")
    for key in ("format", "atif", "source"):
        data["metadata"].pop(key, None)
    data.pop("source")
    for step in data["steps"]:
        step["metadata"].pop("atif", None)
    return data


def read_atif(doc: dict) -> Trajectory:
    (t,) = convert_record(get_adapter("atif"), json.loads(json.dumps(doc)), path="<atif>")
    return t


@pytest.mark.parametrize("variant", [ATIF_V16, OPENHANDS_ROW], ids=lambda p: p.name)
def test_variant_converts_through_the_cli_into_valid_trajectories(variant, tmp_path):
    out = tmp_path / "out.jsonl"
    proc = run("convert", str(variant), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    back = list(read_trajectories(out))  # knowlyr-core's reader validates every record
    assert [comparable(t) for t in back] == [comparable(t) for t in convert_file(variant)]
    schema_valid(back)


def test_atif_v16_message_objects_are_read_in_order():
    (t,) = convert_file(ATIF_V16)
    assert t.id == "3f6c2a9e-8d41-4b7a-9c55-1e2d7f0a6b13"
    assert (t.agent, t.model) == ("openai-agents-atif", "gpt-4.1-mini")
    assert t.metadata["system_prompt"] == "You are a careful shell agent."  # content parts, text only
    assert t.task.description == "The build badge in docs/badge.png is red. Find out why the tests fail."
    assert t.tool_names == ["bash", "bash", "view_image", "bash", "respond"]
    first, second, third, fourth, reply = t.steps

    # step 3: one message object, an OpenAI call with JSON-string arguments, the reasoning
    assert first.thought == "I will run the test suite first."
    assert (first.tool_call.id, first.tool_call.parameters) == ("call_k1", {"command": "pytest -q"})
    assert first.metadata["reasoning_content"] == "The badge only says failing; the test output will say which test."
    assert first.observation.output.endswith("1 failed, 1 passed")
    # step 4: a list of messages; the tool message answers the call it names
    assert second.thought == "Let me read the function under test."
    assert second.tool_call.parameters == {"command": "cat src/math.py"}
    assert second.observation.output == "def add(a, b):\n    return a + b + 1\n"
    # step 5: ATIF-v1.6 content parts in the message and in the result
    assert third.thought == "The badge image should match the failure count."
    assert third.metadata["reasoning_content"] == "Check the image to be sure it is the same build."
    assert third.observation.output == "badge.png (88x20):"
    # step 7: the call is in the message and in the step's tool_calls: read once
    assert (fourth.tool_call.id, fourth.observation.output) == ("call_k4", "..\n2 passed")
    assert reply.tool_call.parameters == {"message": "Fixed: add() returned a + b + 1. Both tests pass now."}
    assert t.usage.prompt_tokens == 2203 and t.usage.cost_usd == 0.00076 and t.usage.api_calls == 5


def test_atif_v16_fields_it_does_not_know_are_kept_in_metadata():
    (t,) = convert_file(ATIF_V16)
    image = {"type": "image", "source": {"media_type": "image/png", "path": "docs/badge.png"}}
    atif = t.metadata["atif"]
    assert atif["schema_version"] == "ATIF-v1.6"
    assert atif["trajectory_id"] == "run-2025-11-03-0007"  # root
    assert atif["agent"] == {"version": "0.4.2", "sdk": "openai-agents-python", "extra": {"temperature": 0.2}}
    assert atif["extra"] == {"harness": "terminal-bench-lite"}
    assert t.metadata["atif_message"]["user"]["content"][1] == image  # the task's image, with the message as it was
    follow_up = {"role": "user", "content": "Can you fix it too?", "name": "maintainer"}
    assert atif["context_steps"][0]["message"] == follow_up  # a later user step, verbatim
    first, second, third, _, reply = t.steps
    assert first.metadata["atif"]["llm_call_count"] == 1 and first.metadata["atif"]["is_copied_context"] is False
    assert first.metadata["atif_message"] == {"messages": [{"role": "assistant", "refusal": None}]}
    assert first.metadata["atif_tool_call"] == {"index": 0}
    assert first.metadata["atif_observation"] == [{"exit_code": 1}]
    assert second.metadata["atif_message"] == {"messages": [{"role": "assistant"}, {"role": "tool"}]}
    assert second.metadata["atif_tool_call"] == {"timeout_s": 30}
    assert third.metadata["atif_observation"] == [{"content_parts": [image]}]
    assert reply.metadata["atif_message"] == {"messages": [{"role": "assistant", "annotations": []}]}


def test_atif_v16_variant_exports_as_valid_atif_that_reads_back(tmp_path):
    (t,) = convert_file(ATIF_V16)
    doc = to_atif(t)
    assert validate_atif(json.loads(json.dumps(doc))) == []
    assert doc["schema_version"] == "ATIF-v1.6" and doc["trajectory_id"] == "run-2025-11-03-0007"
    assert all(isinstance(step["message"], str) for step in doc["steps"])
    assert doc["steps"][5] == {  # the follow-up question: its message object is written as its text
        "step_id": 6,
        "timestamp": "2025-11-03T09:12:20Z",
        "source": "user",
        "message": "Can you fix it too?",
    }
    assert comparable(read_atif(doc)) == comparable(t)

    out = tmp_path / "trajectory.json"
    proc = run("export", "--to", "atif", str(ATIF_V16), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert run("validate", "-f", "atif", str(out)).returncode == 0


@pytest.mark.parametrize("version", ["ATIF-v1.0", "ATIF-v1.5", "ATIF-v1.7", "ATIF-v1.12"])
def test_every_minor_version_is_read(version):
    doc = json.loads(ATIF_V16.read_text())
    doc["schema_version"] = version
    t = read_atif(doc)
    assert t.metadata["atif"]["schema_version"] == version and len(t.steps) == 5
    assert to_atif(t)["schema_version"] == version


def test_another_major_version_is_refused_in_one_line(tmp_path):
    out = tmp_path / "out.jsonl"
    proc = run("convert", str(ATIF_V2), "-o", str(out))
    line = check_refusal(proc.returncode, proc.stdout, proc.stderr, ATIF_V2)
    assert line == (
        f"error: {ATIF_V2}: $.schema_version: unsupported version 'ATIF-v2.0' (this reader reads ATIF-v1.x)"
    )
    assert not out.exists()
    with pytest.raises(ConversionError, match=r"\$\.schema_version: unsupported version 'ATIF-v2\.0'"):
        convert_file(ATIF_V2)


# (change to the v1.6 variant, the one error it must give)
UNREADABLE = [
    (
        lambda d: d["steps"][2].update(message=5),
        "$.steps[2].message: expected a string, content parts or a message object {role, content}, got an integer",
    ),
    (
        lambda d: d["steps"][3]["message"].append(7),
        "$.steps[3].message[2]: expected a string, content parts or a message object {role, content}, got an integer",
    ),
    (
        lambda d: d["steps"][3]["message"][1].update(tool_call_id="call_zz"),
        "$.steps[3].message[1].tool_call_id: 'call_zz' is no tool_call_id of this step",
    ),
    (
        lambda d: d["steps"][2]["message"]["tool_calls"][0]["function"].update(arguments='{"command": '),
        "$.steps[2].message.tool_calls[0].function.arguments: arguments are not valid JSON",
    ),
    (
        lambda d: d["steps"][2]["message"]["tool_calls"][0]["function"].pop("name"),
        "$.steps[2].message.tool_calls[0].function.name: missing required field",
    ),
    (
        lambda d: d["steps"][4]["observation"]["results"][0]["content"].append(3),
        "$.steps[4].observation.results[0].content[2]: expected a string or a content part {type, text}, got an integer",
    ),
    (
        lambda d: d["steps"][5].update(message=[{"role": "user", "content": 9}]),
        "$.steps[5].message[0].content: expected a string or a content part {type, text}, got an integer",
    ),
]


@pytest.mark.parametrize(("change", "problem"), UNREADABLE)
def test_what_cannot_be_interpreted_is_refused_in_one_line(change, problem):
    doc = json.loads(ATIF_V16.read_text())
    change(doc)
    with pytest.raises(ConversionError) as caught:
        list(convert_record(get_adapter("atif"), doc, path="run.json"))
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(f"run.json: {problem}"), str(caught.value)


def test_validate_atif_reads_content_parts_and_refuses_message_objects():
    doc = json.loads(ATIF_V16.read_text())
    assert validate_atif(doc) == [
        "$.steps[1].message: must be a string or a list of content parts, got an object",
        "$.steps[2].message: must be a string or a list of content parts, got an object",
        "$.steps[2].observation.results[0].source_call_id: 'call_k1' is no tool_call_id of this step",
        "$.steps[3].message[0].type: missing required field",
        "$.steps[3].message[1].type: missing required field",
        "$.steps[5].message: must be a string or a list of content parts, got an object",
        "$.steps[6].message: must be a string or a list of content parts, got an object",
        "$.steps[7].message: must be a string or a list of content parts, got an object",
    ]  # message objects are a producer's variant, not ATIF: the reader reads them, the checker names them
    parts = copy.deepcopy(doc["steps"][4]["observation"]["results"][0]["content"])
    assert validate_atif({**doc, "steps": [{"step_id": 1, "source": "user", "message": parts}]}) == []
    parts[1]["source"].pop("path")
    assert validate_atif({**doc, "steps": [{"step_id": 1, "source": "user", "message": parts}]}) == [
        "$.steps[0].message[1].source.path: missing required field"
    ]


def test_openhands_feedback_row_with_null_actions():
    (t,) = convert_file(OPENHANDS_ROW)
    assert t.task.description == "Add a --verbose flag to cli.py that prints each file it reads."
    assert t.tool_names == ["run", "edit", "respond", "finish"]
    run_step, edit, reply, finish = t.steps
    # the action's arguments are in its extras (JSON text); the observation names no cause
    assert run_step.tool_call.parameters == {"command": "grep -n argparse cli.py"}  # runtime args dropped
    assert run_step.thought == "Find where the parser is built."
    assert run_step.observation.output.startswith("3:import argparse") and run_step.observation.exit_code == 0
    assert run_step.duration_s == 0.75 and run_step.metadata["message"] == "Running command: grep -n argparse cli.py"
    assert edit.tool_call.parameters["path"] == "/workspace/cli.py"
    assert edit.observation.output == "[File /workspace/cli.py edited with 1 changes.]"
    assert reply.tool_call.parameters == {"message": "I added --verbose to cli.py."}
    assert reply.observation.output == "Thanks, looks right."  # the user's answer
    assert finish.observation.output == "" and t.outcome.terminated and t.outcome.exit_status == "finished"
    assert t.metadata["skipped_events"] == 1  # event 5: neither an action nor an observation
    assert t.metadata["final_agent_state"] == "finished"
    assert t.metadata["feedback"] == {
        "feedback": "positive",
        "permissions": "public",
        "version": "0.14.1",
        "timestamp": "2024-11-27T10:41:12.000000",
    }
    schema_valid([t])


def test_openhands_ui_events_with_null_action_or_observation():
    """UI events serialised with every key: ``"observation": null`` on actions, ``"action": null``
    (and ``"args": null``) on observations, ``"cause"`` still linking them."""
    events = [
        {
            "id": 0,
            "source": "user",
            "action": "message",
            "observation": None,
            "cause": None,
            "args": {"content": "list the files"},
            "content": None,
            "extras": None,
        },
        {
            "id": 1,
            "source": "agent",
            "action": "run",
            "observation": None,
            "cause": None,
            "args": {"command": "ls", "thought": "look"},
            "content": None,
            "extras": None,
        },
        {"id": 2, "source": "environment", "action": None, "observation": None, "message": "heartbeat"},
        {
            "id": 3,
            "source": "agent",
            "action": None,
            "observation": "run",
            "cause": 1,
            "args": None,
            "content": "a.py",
            "extras": {"metadata": {"exit_code": 0}},
        },
        {"id": 4, "source": "agent", "action": "finish", "observation": None, "args": {"outputs": {}}},
    ]
    (t,) = convert_record(get_adapter("openhands"), events, path="ui.json")
    assert t.task.description == "list the files" and t.tool_names == ["run", "finish"]
    assert t.steps[0].observation.output == "a.py" and t.steps[0].observation.exit_code == 0
    assert "message" not in t.steps[0].metadata  # it had args: nothing to keep beside them
    assert t.metadata["skipped_events"] == 1
    again = copy.deepcopy(events)
    again[3].pop("cause")  # an observation without a cause in a stream that has them elsewhere
    (u,) = convert_record(get_adapter("openhands"), again, path="ui.json")
    assert u.steps[0].observation.output == "a.py"


def test_the_openhands_row_is_not_taken_for_a_swe_agent_trajectory():
    # both adapters look at a "trajectory" list whose first item has "action" and "observation"
    from agentrecorder.detect import detect

    assert detect(json.loads(OPENHANDS_ROW.read_text())).adapter.name == "openhands"


class TestATIFv16MessageObjects(AdapterConformance):
    format = "atif"

    def sample(self):
        return json.loads(ATIF_V16.read_text())


class TestOpenHandsFeedbackRow(AdapterConformance):
    format = "openhands"

    def sample(self):
        return json.loads(OPENHANDS_ROW.read_text())
