"""Malformed variants of every interop sample: one ``error:`` line naming the file and the problem.

Each variant breaks one thing in a published file (a wrong type at a known JSON path, a
truncated file, a broken row in the middle of a data set, a dangling reference) and is fed to
``export`` and ``convert``: exit code 2, the file and the JSON path in the one error line, no
traceback, and an existing output file left byte for byte as it was. ``validate_atif`` is
checked against hand-made breaches of the specification's required fields.
"""

from __future__ import annotations

import copy
import json

import pytest

from agentrecorder.atif_validation import validate_atif
from agentrecorder.cli import main
from knowlyrcore.testing import check_refusal

PRECIOUS = b'{"precious": "an earlier export"}\n'


def _set(doc, where: tuple, value):
    target = doc
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value


# (sample, JSON path to change, new value, what the error line must say)
VARIANTS = [
    (
        "atif_terminus2_context-summarization.json",
        ("schema_version",),
        "ATIF-v2.0",
        "$.schema_version: unsupported version 'ATIF-v2.0' (this reader reads ATIF-v1.x)",
    ),
    (
        "atif_terminus2_context-summarization.json",
        ("steps", 1, "tool_calls", 0, "function_name"),
        7,
        "$.steps[1].tool_calls[0].function_name: expected a string, got an integer (7)",
    ),
    (
        "atif_terminus2_context-summarization.json",
        ("steps", 2, "observation", "results", 0, "source_call_id"),
        "call_9_9",
        "$.steps[2].observation.results[0].source_call_id: 'call_9_9' is no tool_call_id of this step",
    ),
    (
        "atif_terminus2_context-summarization.json",
        ("steps", 1, "metrics", "logprobs"),
        [-0.5],
        "$.steps[1].metrics.logprobs: 1 log-probs for 60 completion_token_ids",
    ),
    (
        "atif_terminus2_context-summarization.json",
        ("steps", 3, "metrics", "completion_token_ids", 4),
        "1004",
        "$.steps[3].metrics.completion_token_ids[4]: expected an integer, got a string",
    ),
    (
        "atif_terminus2_invalid-json.json",
        ("steps", 2, "source"),
        "robot",
        "$.steps[2].source: expected 'system', 'user' or 'agent', got 'robot'",
    ),
    (
        "atif_terminus2_invalid-json.json",
        ("steps", 1, "timestamp"),
        "yesterday",
        "$.steps[1].timestamp: not an ISO 8601 timestamp: 'yesterday'",
    ),
    (
        "adp_nebius_swe-agent.std.json",
        (2, "content", 5, "kwargs"),
        ["path"],  # content[5]: api_action open
        "$[2].content[5].kwargs: expected an object, got a list",
    ),
    (
        "adp_nebius_swe-agent.std.json",
        (4, "content", 5, "class_"),
        "video_observation",
        "$[4].content[5].class_: unknown ADP class 'video_observation'",
    ),
    (
        "adp_swe-gym_openhands.std.json",
        (1, "details", "resolved"),
        "maybe",
        "$[1].details.resolved: expected a boolean (or 'True'/'False'), got 'maybe'",
    ),
    (
        "nebius_swe-agent-trajectories_5rows.json",
        (3, "trajectory", 4, "text"),
        5,
        "$[3].trajectory[4].text: expected a string, got an integer (5)",
    ),
    (
        "nebius_swe-agent-trajectories_5rows.json",
        (0, "trajectory", 2, "role"),
        "assistant",
        "$[0].trajectory[2].role: expected one of system, user, ai, got 'assistant'",
    ),
    (
        "nebius_swe-agent-trajectories_5rows.json",
        (1, "target"),
        "yes",
        "$[1].target: expected a boolean (or 'True'/'False'), got 'yes'",
    ),
    (
        "swe-gym_openhands_messages_5rows.json",
        (2, "messages", 2, "tool_calls", 0, "function", "arguments"),
        '{"command": ',
        "$[2].messages[2].tool_calls[0].function.arguments: arguments are not valid JSON",
    ),
    (
        "swe-gym_openhands_messages_5rows.json",
        (4, "test_result"),
        ["not", "an", "object"],
        "$[4].test_result: expected an object, got a list",
    ),
    ("openhands_ui-export_demo1.json", (7, "args"), "mkdir", "$[7].args: expected an object, got a string"),
    (
        "openhands_ui-export_demo1.json",
        (9, "tool_call_metadata", "function_name"),
        None,
        "$[9].tool_call_metadata.function_name: missing required field",
    ),
]
COMMANDS = {
    "export atif": ["export", "--to", "atif", "{F}", "-o", "{OUT}"],
    "export adp": ["export", "--to", "adp", "{F}", "-o", "{OUT}"],
    "convert": ["convert", "{F}", "-o", "{OUT}"],
}


def _refuse(command: str, bad, tmp_path, capsys) -> str:
    out = tmp_path / "existing.jsonl"
    out.write_bytes(PRECIOUS)
    code = main([part.format(F=bad, OUT=out) for part in COMMANDS[command]])
    captured = capsys.readouterr()
    line = check_refusal(code, captured.out, captured.err, bad, outputs={out: PRECIOUS})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([bad.name, "existing.jsonl"])  # no temp file left
    return line


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(("sample", "where", "value", "expected"), VARIANTS)
def test_broken_value_is_named_by_file_and_path(sample, where, value, expected, command, real_json, tmp_path, capsys):
    doc = copy.deepcopy(real_json(f"interop/{sample}"))
    if value is None:
        del doc[where[0]][where[1]][where[2]]
    else:
        _set(doc, where, value)
    bad = tmp_path / sample
    bad.write_text(json.dumps(doc))
    line = _refuse(command, bad, tmp_path, capsys)
    assert line.startswith(f"error: {bad}: ")
    assert expected in line, line


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(
    "sample",
    [
        "atif_terminus2_invalid-json.json",
        "adp_swe-gym_openhands.std.json",
        "nebius_swe-agent-trajectories_5rows.json",
        "swe-gym_openhands_messages_5rows.json",
        "openhands_ui-export_demo1.json",
    ],
)
def test_truncated_file(sample, command, real, tmp_path, capsys):
    text = real(f"interop/{sample}").read_text()
    bad = tmp_path / sample
    bad.write_text(text[: len(text) * 2 // 3])
    line = _refuse(command, bad, tmp_path, capsys)
    assert "truncated JSON, the file ends early" in line, line


def test_a_data_set_broken_after_its_first_rows_names_the_row(real_json, tmp_path, capsys):
    """Rows are read incrementally: a row that is not JSON is named by its index."""
    rows = real_json("interop/nebius_swe-agent-trajectories_5rows.json")
    text = json.dumps(rows)
    third = text.index('{"instance_id": "marshmallow-code__apispec-811_21"')
    bad = tmp_path / "rows.json"
    bad.write_text(text[:third] + "{'instance_id': 1}" + text[third + 5 :])
    line = _refuse("export atif", bad, tmp_path, capsys)
    assert line.startswith(f"error: {bad}: $[2]: invalid JSON: ")


def test_a_row_in_another_format_is_named(real_json, tmp_path, capsys):
    rows = real_json("interop/adp_nebius_swe-agent.std.json")
    rows[3] = {"id": "x", "messages": []}
    bad = tmp_path / "adp.json"
    bad.write_text(json.dumps(rows))
    line = _refuse("export adp", bad, tmp_path, capsys)
    assert line == f"error: {bad}: $[3]: not in the adp format: no 'content' list"


def _valid_doc() -> dict:
    return {
        "schema_version": "ATIF-v1.5",
        "session_id": "s-1",
        "agent": {"name": "a", "version": "1.0"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "hi"},
            {
                "step_id": 2,
                "source": "agent",
                "message": "",
                "tool_calls": [{"tool_call_id": "c1", "function_name": "ls", "arguments": {}}],
                "observation": {"results": [{"source_call_id": "c1", "content": "a.py"}]},
                "metrics": {"completion_token_ids": [1, 2], "logprobs": [-0.1, -0.2], "prompt_tokens": 5},
            },
        ],
    }


# (change, the one problem it must give)
SPEC_BREACHES = [
    (lambda d: d.pop("session_id"), "$.session_id: missing required field"),
    (lambda d: d["agent"].pop("version"), "$.agent.version: missing required field"),
    (lambda d: d.update(schema_version="1.0"), "$.schema_version: must be 'ATIF-v1.<minor>', got '1.0'"),
    (
        lambda d: d["steps"][1].update(step_id=3),
        "$.steps[1].step_id: must be 2 (step ids count 1, 2, 3... in order), got 3",
    ),
    (lambda d: d["steps"][0].pop("message"), "$.steps[0].message: missing required field"),
    (
        lambda d: d["steps"][0].update(reasoning_content="hmm"),
        "$.steps[0].reasoning_content: only agent steps may have it (this step's source is 'user')",
    ),
    (
        lambda d: d["steps"][1]["tool_calls"][0].pop("arguments"),
        "$.steps[1].tool_calls[0].arguments: missing required field",
    ),
    (
        lambda d: d["steps"][1]["tool_calls"].append(dict(d["steps"][1]["tool_calls"][0])),
        "$.steps[1].tool_calls[1].tool_call_id: 'c1' is used twice in this step",
    ),
    (
        lambda d: d["steps"][1]["observation"]["results"][0].update(source_call_id="c2"),
        "$.steps[1].observation.results[0].source_call_id: 'c2' is no tool_call_id of this step",
    ),
    (
        lambda d: d["steps"][1]["metrics"].update(prompt_tokens=-1),
        "$.steps[1].metrics.prompt_tokens: must not be negative, got -1",
    ),
    (
        lambda d: d["steps"][1]["metrics"]["logprobs"].append("x"),
        "$.steps[1].metrics.logprobs[2]: must be a number, got a string",
    ),
    (
        lambda d: d["steps"][1].update(timestamp="noon"),
        "$.steps[1].timestamp: must be an ISO 8601 timestamp, got 'noon'",
    ),
    (
        lambda d: d.update(final_metrics={"total_steps": 2.5}),
        "$.final_metrics.total_steps: must be an integer, got a number",
    ),
]


def test_validate_atif_accepts_the_minimal_document():
    assert validate_atif(_valid_doc()) == []


@pytest.mark.parametrize(("change", "problem"), SPEC_BREACHES)
def test_validate_atif_names_each_breach(change, problem):
    doc = _valid_doc()
    change(doc)
    assert validate_atif(doc) == [problem]


def test_validate_command_checks_the_spec(tmp_path, capsys):
    doc = _valid_doc()
    doc["agent"].pop("name")
    doc["steps"][0]["step_id"] = 7
    path = tmp_path / "run.atif.json"
    path.write_text(json.dumps(doc))
    assert main(["validate", "-f", "atif", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {path}: not valid ATIF: $.agent.name: missing required field (and 1 more)\n"
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(_valid_doc()) + "\n" + json.dumps(doc) + "\n")
    assert main(["validate", str(rows)]) == 2  # detected as ATIF, then checked line by line
    assert capsys.readouterr().err.startswith(f"error: {rows}:2: not valid ATIF: $.agent.name: missing required field")
