"""Shapes of each format that the published sample files do not exercise.

The records here are written to the documented shapes (OpenHands ``output.jsonl`` with
metrics and ``[action, observation]`` pairs, SWE-agent ``execution_time`` and
``replay_config``, the mini-swe-agent v1.1 dict, ShareGPT function calls, OpenAI legacy
``function_call``); every expected value is visible in the record above its assertion.
"""

from __future__ import annotations

import json

from agentrecorder import convert_file
from agentrecorder.adapters.swe_agent import parse_text_action


def _write(tmp_path, name, data, jsonl=False):
    path = tmp_path / name
    if jsonl:
        path.write_text("".join(json.dumps(r) + "\n" for r in data))
    else:
        path.write_text(json.dumps(data))
    return path


def _run_event(eid, command, ts):
    return {
        "id": eid,
        "timestamp": ts,
        "source": "agent",
        "action": "run",
        "args": {"command": command, "thought": f"run {command}", "blocking": False, "is_input": False},
    }


def _run_result(eid, cause, output, code, ts):
    return {
        "id": eid,
        "timestamp": ts,
        "source": "agent",
        "observation": "run",
        "cause": cause,
        "content": output,
        "extras": {"command": "x", "metadata": {"exit_code": code}},
    }


def test_openhands_output_jsonl_records(tmp_path):
    history = [
        {
            "id": 0,
            "timestamp": "2025-01-01T00:00:00",
            "source": "user",
            "action": "message",
            "args": {"content": "fix it"},
        },
        _run_event(1, "pytest -q", "2025-01-01T00:00:01"),
        _run_result(2, 1, "1 failed", 1, "2025-01-01T00:00:03.5"),
        {"id": 3, "source": "environment", "observation": "agent_state_changed", "extras": {"agent_state": "running"}},
        {"id": 4, "timestamp": "2025-01-01T00:00:04", "source": "agent", "action": "finish", "args": {"outputs": {}}},
    ]
    records = [
        {
            "instance_id": "repo__proj-1",
            "instruction": "Fix the failing test in proj.",
            "history": history,
            "metrics": {
                "accumulated_cost": 0.042,
                "accumulated_token_usage": {"prompt_tokens": 1200, "completion_tokens": 80},
            },
            "test_result": {"git_patch": "diff --git a/p.py b/p.py\n", "resolved": True},
            "metadata": {"agent_class": "CodeActAgent", "llm_config": {"model": "gpt-4o"}},
        },
        # older histories hold [action, observation] pairs
        {
            "instance_id": "repo__proj-2",
            "instruction": "Second task.",
            "history": [[_run_event(1, "ls", None), _run_result(2, 1, "a.py", 0, None)]],
            "error": "agent stuck in a loop",
        },
    ]
    first, second = convert_file(_write(tmp_path, "output.jsonl", records, jsonl=True))
    assert first.id == "repo__proj-1" and first.task.description == "Fix the failing test in proj."
    assert first.tool_names == ["run", "finish"]
    assert first.steps[0].tool_call.parameters == {"command": "pytest -q"}  # runtime args dropped
    assert first.steps[0].thought == "run pytest -q"
    assert first.steps[0].observation.output == "1 failed" and first.steps[0].observation.exit_code == 1
    assert first.steps[0].duration_s == 2.5
    assert (first.agent, first.model) == ("CodeActAgent", "gpt-4o")
    assert first.usage.prompt_tokens == 1200 and first.usage.completion_tokens == 80 and first.usage.cost_usd == 0.042
    assert first.outcome.patch == "diff --git a/p.py b/p.py\n" and first.outcome.success is True
    assert first.outcome.exit_status == "finished"
    assert second.tool_names == ["run"] and second.steps[0].observation.output == "a.py"
    assert second.outcome.exit_status == "error" and second.metadata["error"] == "agent stuck in a loop"


def test_swe_agent_text_actions_with_timing_and_model(tmp_path):
    record = {
        "trajectory": [
            {"action": "search_dir foo src\n", "observation": "3 matches", "thought": "t", "execution_time": 0.5},
            {"action": "goto 120\n", "observation": "...", "thought": "t2", "execution_time": 0.1},
            {"action": "scroll_down\n", "observation": "...", "thought": "", "state": {"open_file": "a.py"}},
            {"action": "", "observation": "format error", "thought": ""},
        ],
        "history": [{"role": "user", "content": "Fix #12", "agent": "main"}],
        "info": {
            "exit_status": "exit_cost",
            "model_stats": {"tokens_sent": 10, "tokens_received": 2, "instance_cost": 0.5},
        },
        "replay_config": json.dumps({"agent": {"model": {"name": "claude-3-7-sonnet"}}}),
    }
    (t,) = convert_file(_write(tmp_path, "x.traj", record))
    assert t.tool_names == ["search_dir", "goto", "scroll_down", "no_action"]
    assert t.steps[0].tool_call.parameters == {"search_term": "foo", "dir": "src"}
    assert t.steps[1].tool_call.parameters == {"line_number": 120}
    assert [s.duration_s for s in t.steps] == [0.5, 0.1, None, None]
    assert t.steps[2].metadata["state"] == {"open_file": "a.py"}
    assert t.model == "claude-3-7-sonnet" and t.task.description == "Fix #12"
    assert t.outcome.exit_status == "exit_cost" and t.outcome.truncated and not t.outcome.terminated
    assert t.usage.total_tokens == 12 and t.usage.api_calls is None


def test_text_action_parsing():
    assert parse_text_action('create "new file.py"') == ("create", {"filename": "new file.py"})
    assert parse_text_action("open a.py 40") == ("open", {"path": "a.py", "line_number": 40})
    assert parse_text_action("find_file x y extra") == ("find_file", {"file_name": "x", "dir": "y", "args": ["extra"]})
    assert parse_text_action("edit 3:5\n    return 1\n    pass\nend_of_edit") == (
        "edit",
        {"start_line": 3, "end_line": 5, "replacement": "    return 1\n    pass"},
    )
    assert parse_text_action("ls -la && cat 'a b'") == ("bash", {"command": "ls -la && cat 'a b'"})
    assert parse_text_action('open "unbalanced') == ("open", {"path": '"unbalanced'})


def test_mini_swe_agent_v11_dict_and_format_errors(tmp_path):
    record = {
        "trajectory_format": "mini-swe-agent-1",
        "info": {
            "exit_status": "LimitsExceeded",
            "submission": "",
            "model_stats": {"instance_cost": 0.31, "api_calls": 3},
            "config": {"model": {"model_name": "anthropic/claude-sonnet-4"}},
        },
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Please solve this issue: add a --verbose flag"},
            {"role": "assistant", "content": "THOUGHT: look around.\n\n```bash\nls -la\n```"},
            {"role": "user", "content": "<returncode>0</returncode>\n<output>\nsetup.py\nsrc\n</output>"},
            {"role": "assistant", "content": "Two commands:\n```bash\nls\n```\n```bash\npwd\n```"},
            {"role": "user", "content": "Please always provide EXACTLY ONE action in triple backticks."},
            {"role": "assistant", "content": "THOUGHT: grep.\n```bash\ngrep -rn verbose src\n```"},
            {"role": "user", "content": "<returncode>1</returncode>\n<output>\n</output>"},
        ],
    }
    (t,) = convert_file(_write(tmp_path, "run.traj.json", record))
    assert t.tool_names == ["bash", "no_action", "bash"]
    assert t.steps[0].tool_call.parameters == {"command": "ls -la"} and t.steps[0].thought == "THOUGHT: look around."
    assert t.steps[0].observation.output == "setup.py\nsrc\n" and t.steps[0].observation.exit_code == 0
    assert t.steps[1].metadata["format_error"] == "2 bash blocks"
    assert t.steps[1].observation.output.startswith("Please always provide EXACTLY ONE action")
    assert t.steps[2].observation.exit_code == 1
    assert t.model == "anthropic/claude-sonnet-4"
    assert t.usage.cost_usd == 0.31 and t.usage.api_calls == 3
    assert t.outcome.exit_status == "LimitsExceeded" and t.outcome.truncated and t.outcome.patch is None


def test_sharegpt_list_with_function_calls(tmp_path):
    records = [
        {
            "conversations": [
                {"from": "system", "value": "Be brief."},
                {"from": "human", "value": "2+3?"},
                {"from": "function_call", "value": '{"name": "calculator", "arguments": "{\\"expr\\": \\"2+3\\"}"}'},
                {"from": "observation", "value": "5"},
                {"from": "gpt", "value": "5"},
            ]
        },
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]},
    ]
    first, second = convert_file(_write(tmp_path, "sg.json", records))
    assert first.tool_names == ["calculator", "respond"]
    assert first.steps[0].tool_call.parameters == {"expr": "2+3"}
    assert first.steps[0].observation.output == "5"
    assert first.metadata["system_prompt"] == "Be brief." and first.task.description == "2+3?"
    assert second.tool_names == ["respond"] and second.steps[0].tool_call.parameters == {"message": "hello"}
    assert (first.id, second.id) == ("sg", "sg#1")


def test_openai_messages_record_with_legacy_function_call_and_usage(tmp_path):
    record = {
        "id": "conv-7",
        "model": "gpt-3.5-turbo-0613",
        "usage": {"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59},
        "reward": 0.5,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "weather in Oslo?"}]},
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "weather", "arguments": '{"city": "Oslo"}'},
            },
            {"role": "function", "name": "weather", "content": "-3C"},
            {"role": "assistant", "content": "It is -3°C."},
        ],
    }
    (t,) = convert_file(_write(tmp_path, "chat.json", record))
    assert t.tool_names == ["weather", "respond"]
    assert t.steps[0].tool_call.parameters == {"city": "Oslo"} and t.steps[0].observation.output == "-3C"
    assert t.task.description == "weather in Oslo?" and t.model == "gpt-3.5-turbo-0613"
    assert t.usage.total_tokens == 59
    assert t.outcome.score == 0.5 and t.outcome.success is False
