"""Every published sample in shared/data/real/interop converts; expectations read off the files by hand.

Each test names the source it checks against (ATIF step ids, ADP content positions, data-set
row fields). Step counts follow the adapters' mappings: ATIF one knowlyr step per tool call
(or per message-only agent step), ADP one per action, nebius one per ``ai`` turn, SWE-Gym one
per tool call plus one per text-only assistant message, OpenHands one per agent action.
"""

from __future__ import annotations

import pytest

from agentrecorder import convert_file
from agentrecorder.atif_validation import validate_atif

INTEROP = "interop/{}"


def test_atif_context_summarization(real, real_json):
    name = INTEROP.format("atif_terminus2_context-summarization.json")
    (t,) = convert_file(real(name))
    # steps 2-4 and 7-10 are agent steps with one tool call each; 1 and 6 user, 5 system
    assert len(t.steps) == 7
    assert t.tool_names == ["bash_command"] * 5 + ["mark_task_complete"] * 2
    assert t.id == "NORMALIZED_SESSION_ID" and t.agent == "terminus-2" and t.model == "openai/gpt-4o"
    assert t.steps[0].tool_call.parameters == {"keystrokes": "mkdir test_dir\n", "duration": 0.1}
    assert t.steps[0].tool_call.id == "call_0_1"
    assert t.steps[0].thought.startswith("Analysis: Terminal is ready. Let me create a test directory first.")
    # step 7 (after the handoff): printf into hello.txt
    assert t.steps[3].tool_call.parameters == {"keystrokes": "printf 'Hello, world!\\n' > hello.txt\n", "duration": 0.1}
    assert (
        t.steps[4].observation.output
        == "New Terminal Output:\n\nroot@CONTAINER_ID:/app# cat hello.txt\nHello, world!\n\n"
    )
    assert t.steps[5].tool_call.id == "call_5_task_complete" and t.steps[5].tool_call.parameters == {}
    # step 2 metrics: 60 completion token ids 1000, 1001, ... with log-probs -0.1, -0.2, ...
    step = t.steps[0]
    assert len(step.token_ids) == len(step.logprobs) == 60
    assert step.token_ids[:4] == [1000, 1001, 1002, 1003]
    assert step.logprobs[:2] == [-0.1, -0.2]
    assert step.metadata["atif"]["metrics"]["prompt_tokens"] == 682
    assert len(step.metadata["atif"]["metrics"]["prompt_token_ids"]) == 682
    assert step.metadata["atif"]["metrics"]["cost_usd"] == 0.002305
    assert len(t.steps[3].token_ids) == 420  # step 7: completion_tokens 420
    # the system step 5 (context summarisation) and the user step 6 are kept with their refs
    context = t.metadata["atif"]["context_steps"]
    assert [s["step_id"] for s in context] == [5, 6]
    refs = context[0]["observation"]["results"][0]["subagent_trajectory_ref"]
    assert [r["session_id"] for r in refs] == [
        "test-session-context-summarization-summarization-1-summary",
        "test-session-context-summarization-summarization-1-questions",
        "test-session-context-summarization-summarization-1-answers",
    ]
    assert refs[0]["trajectory_path"] == "trajectory.summarization-1-summary.json"
    assert context[1]["message"].startswith("Here are the answers the other agent provided.")
    assert t.task.description.startswith("You are an AI assistant tasked with solving command-line tasks")
    assert 'Create a file called hello.txt with "Hello, world!" as the content.' in t.task.description
    # final_metrics
    assert t.usage.prompt_tokens == 7802 and t.usage.completion_tokens == 1030
    assert t.usage.cost_usd == pytest.approx(0.029805)
    assert t.metadata["atif"]["agent"] == {"version": "2.0.0", "extra": {"parser": "json", "temperature": 0.7}}
    # ATIF has no outcome: nobody judged the run
    assert t.outcome.success is None and t.outcome.exit_status is None
    assert validate_atif(real_json(name)) == []


def test_atif_invalid_json_reply(real, real_json):
    name = INTEROP.format("atif_terminus2_invalid-json.json")
    (t,) = convert_file(real(name))
    # step 2 has no tool call (the model's reply did not parse), steps 3-5 one call each
    assert t.tool_names == ["respond", "bash_command", "mark_task_complete", "mark_task_complete"]
    reply = t.steps[0]
    assert reply.tool_call.parameters["message"].startswith("I need to create a file called hello.txt")
    assert reply.tool_call.parameters["message"].endswith("This should work!")
    assert reply.observation.output.startswith(
        "Previous response had parsing errors:\nERROR: Missing required fields: analysis, plan"
    )
    assert reply.metadata["reasoning_content"].startswith("The task is straightforward - I need to create a single")
    assert t.steps[1].tool_call.id == "call_1_1"
    assert t.steps[1].tool_call.parameters == {"keystrokes": "printf 'Hello, world!\\n' > hello.txt\n", "duration": 0.1}
    assert t.steps[1].metadata["reasoning_content"].startswith("I made a mistake in my previous response")
    # metrics carry counts only here: no token ids or log-probs
    assert all(s.token_ids is None and s.logprobs is None for s in t.steps)
    assert [s.metadata["atif"]["metrics"]["completion_tokens"] for s in t.steps] == [100, 50, 30, 20]
    assert t.usage.prompt_tokens == 2417 and t.usage.completion_tokens == 200
    assert "context_steps" not in t.metadata["atif"]
    assert validate_atif(real_json(name)) == []


def swe_row(t):
    """(id, steps, model, tests passed, tests failed) of a converted SWE-agent row."""
    return (t.id, len(t.steps), t.model, t.outcome.tests.passed, t.outcome.tests.failed)


# The same five nebius/SWE-agent-trajectories rows as ADP publishes them and in their own format;
# per row (id, steps, model, tests passed, tests failed). ADP: a step per action in content (code,
# api and message actions); nebius: one per ``ai`` turn, so one fewer (no closing message).
SWE_AGENT_ROWS = {
    "adp_nebius_swe-agent.std.json": [
        ("tomerfiliba__plumbum-366_17", 7, "swe-agent-llama-70b", 6, 0),
        ("tempoCollaboration__OQuPy-74_55", 15, "swe-agent-llama-70b", 1, 0),
        ("marshmallow-code__apispec-811_21", 6, "swe-agent-llama-70b", 95, 2),
        ("brightway-lca__brightway2-analyzer-19_23", 9, "swe-agent-llama-405b", 8, 2),
        ("ReviewNB__treon-25_38", 17, "swe-agent-llama-70b", 7, 0),
    ],
    "nebius_swe-agent-trajectories_5rows.json": [
        ("tomerfiliba__plumbum-366_17", 6, "swe-agent-llama-70b", 6, 0),
        ("tempoCollaboration__OQuPy-74_55", 14, "swe-agent-llama-70b", 1, 0),
        ("marshmallow-code__apispec-811_21", 5, "swe-agent-llama-70b", 95, 2),
        ("brightway-lca__brightway2-analyzer-19_23", 8, "swe-agent-llama-405b", 8, 2),
        ("ReviewNB__treon-25_38", 16, "swe-agent-llama-70b", 7, 0),
    ],
}


@pytest.mark.parametrize("name", SWE_AGENT_ROWS)
def test_swe_agent_rows(real, name):
    assert [swe_row(t) for t in convert_file(real(INTEROP.format(name)))] == SWE_AGENT_ROWS[name]


def test_adp_nebius_first_row(real):
    t = convert_file(real(INTEROP.format("adp_nebius_swe-agent.std.json")))[0]
    # content[1] code_action "ls -F"; [3] find_file; [5] open; [7] edit; [9] python; [11] submit; [13] message
    assert t.tool_names == ["bash", "find_file", "open", "edit", "bash", "submit", "respond"]
    assert t.steps[0].tool_call.parameters == {"command": "ls -F"}
    assert t.steps[1].tool_call.parameters == {"file_name": '"image.py"', "dir": '"plumbum"'}  # quotes as published
    assert t.steps[3].tool_call.parameters == {
        "start_line": 5,
        "end_line": 5,
        "replacement_text": '"import plumbum.cli as cli\n"',
    }
    assert t.steps[4].tool_call.parameters == {"command": 'python -c "import plumbum.cli.image"'}
    assert t.steps[6].tool_call.parameters == {"message": "<finish> I did it! The task is now complete. </finish>"}
    assert t.steps[1].thought.startswith("It looks like the `plumbum` directory is present")
    assert t.steps[0].observation.output.startswith("CHANGELOG.rst\nCONTRIBUTING.rst\nLICENSE")
    assert t.steps[5].observation.output == "Task completed successfully."
    assert t.task.description.startswith("We're currently solving the following issue within our repository.")
    # details: model_name, exit_status, generated_patch, eval_logs (no resolved flag in this file)
    assert t.outcome.exit_status == "submitted" and t.outcome.success is None
    assert t.outcome.patch.startswith("\ndiff --git a/plumbum/cli/image.py b/plumbum/cli/image.py")
    assert t.task.domain == "coding"


# per row: (id, actions, first tool, passed)
ADP_SWE_GYM = [
    ("python__mypy-15976_0", 23, "str_replace_editor", 4),
    ("Project-MONAI__MONAI-5686_4", 11, "str_replace_editor", 10),
    ("Project-MONAI__MONAI-6849_1", 13, "str_replace_editor", 2),
    ("getmoto__moto-6387_0", 18, "str_replace_editor", 4),
    ("Project-MONAI__MONAI-3715_4", 31, "str_replace_editor", 2),
]


def test_adp_swe_gym_rows(real):
    rows = convert_file(real(INTEROP.format("adp_swe-gym_openhands.std.json")))
    assert [(t.id, len(t.steps), t.tool_names[0], t.outcome.tests.passed) for t in rows] == ADP_SWE_GYM
    # details.resolved is the string 'True' in every row
    assert all(t.outcome.success is True and t.outcome.score == 1.0 for t in rows)
    t = rows[0]
    assert t.steps[0].tool_call.parameters == {
        "command": "view",
        "path": "/workspace/python__mypy__1.6",
        "view_range": [0, -1],
    }
    assert t.steps[0].observation.output == (
        "ERROR:\nThe `view_range` parameter is not allowed when `path` points to a directory."
    )
    assert t.steps[5].tool_call.name == "bash"  # content[11]: code_action bash
    assert t.steps[5].tool_call.parameters == {"command": "python3 /workspace/python__mypy__1.6/reproduce_error.py"}
    # the last content item: message_action "<finish> Task completed. </finish>", description null
    assert t.steps[-1].tool_call.parameters == {"message": "<finish> Task completed. </finish>"}
    assert t.steps[-1].thought == ""
    # details.tools and details.test_result are JSON strings
    assert [tool["function"]["name"] for tool in t.metadata["tools"]] == [
        "execute_bash",
        "finish",
        "str_replace_editor",
    ]
    assert t.outcome.patch.startswith("diff --git a/mypy/plugins/attrs.py b/mypy/plugins/attrs.py")
    assert t.metadata["details"]["run_id"] == "gpt-4o-2024-08-06_maxiter_50_N_v2.1-no-hint-train-t0-run_1"
    assert t.metadata["details"]["report"]["resolved"] is True


def test_nebius_rows(real):
    rows = convert_file(real(INTEROP.format("nebius_swe-agent-trajectories_5rows.json")))
    # every row: target true, exit_status submitted, the last ai turn runs submit
    for t in rows:
        assert t.outcome.success is True and t.outcome.exit_status == "submitted" and t.outcome.terminated
        assert t.tool_names[-1] == "submit"
        assert t.metadata["system_prompt"].startswith("SETTING: You are an autonomous programmer")
        assert t.metadata["cutoff_date"] == "01.01.2023"
    t = rows[0]
    # ai turns: ls -F / find_file "image.py" plumbum / open ... / edit 5:5 / python -c ... / submit
    assert t.tool_names == ["bash", "find_file", "open", "edit", "bash", "submit"]
    assert t.steps[0].tool_call.parameters == {"command": "ls -F"}
    assert t.steps[1].tool_call.parameters == {"file_name": "image.py", "dir": "plumbum"}
    assert t.steps[2].tool_call.parameters == {"path": "plumbum/cli/image.py"}
    assert t.steps[3].tool_call.parameters == {
        "start_line": 5,
        "end_line": 5,
        "replacement": "import plumbum.cli as cli",
    }
    assert t.steps[4].tool_call.parameters == {"command": 'python -c "import plumbum.cli.image"'}
    assert t.steps[0].thought.startswith("To start addressing the issue, we need to locate the `image.py` file")
    assert t.steps[0].observation.output.startswith("CHANGELOG.rst\nCONTRIBUTING.rst")
    assert t.steps[5].observation.output == ""  # nothing answers the final submit turn
    assert t.task.description.startswith("We're currently solving the following issue within our repository.")
    assert t.outcome.patch.startswith("\ndiff --git a/plumbum/cli/image.py b/plumbum/cli/image.py")
    assert t.outcome.tests.output.endswith("All tests passed.\n")  # eval_logs


# per row: (instance_id, tool calls + text-only assistant messages)
SWE_GYM = [
    ("python__mypy-15976_0", 21 + 2, 4),
    ("Project-MONAI__MONAI-5686_4", 9 + 2, 10),
    ("Project-MONAI__MONAI-6849_1", 11 + 2, 2),
    ("getmoto__moto-6387_0", 17 + 1, 4),
    ("Project-MONAI__MONAI-3715_4", 29 + 1, 2),
]


def test_swe_gym_message_rows(real):
    rows = convert_file(real(INTEROP.format("swe-gym_openhands_messages_5rows.json")))
    assert [(t.id, len(t.steps), t.outcome.tests.passed) for t in rows] == SWE_GYM
    assert all(t.outcome.success is True and t.task.domain == "coding" for t in rows)  # resolved: true
    t = rows[0]
    assert t.steps[0].tool_call.name == "str_replace_editor"
    assert t.steps[0].tool_call.parameters == {
        "command": "view",
        "path": "/workspace/python__mypy__1.6",
        "view_range": [0, -1],
    }
    assert t.steps[0].tool_call.id == "call_wmUMCvkWsBrXZdFlTSwE3sy6"
    assert t.steps[0].observation.output.startswith("OBSERVATION:\nERROR:\nThe `view_range` parameter is not allowed")
    # the last assistant message calls finish {}
    assert t.steps[-1].tool_call.name == "finish" and t.steps[-1].tool_call.parameters == {}
    assert t.steps[-1].tool_call.id == "call_EcwAiBKjBdR3vksPM0y7LVA0"
    assert [tool["function"]["name"] for tool in t.metadata["tools"]] == [
        "execute_bash",
        "finish",
        "str_replace_editor",
    ]
    assert t.metadata["run_id"] == "gpt-4o-2024-08-06_maxiter_50_N_v2.1-no-hint-train-t0-run_1"
    assert t.outcome.patch.startswith("diff --git a/mypy/plugins/attrs.py b/mypy/plugins/attrs.py")
    assert t.metadata["test_result"]["report"]["failed_apply_patch"] is False
    assert t.metadata["system_prompt"].startswith("You are a helpful assistant that can interact with a computer")
    assert t.task.description.startswith("<uploaded_files>\n/workspace/python__mypy__1.6\n</uploaded_files>")


def test_openhands_ui_export(real):
    (t,) = convert_file(real(INTEROP.format("openhands_ui-export_demo1.json")))
    # agent actions: 7 run, 9 edit, 11 edit, 13 run, 15 message
    assert t.tool_names == ["execute_bash", "str_replace_editor", "str_replace_editor", "execute_bash", "respond"]
    assert t.steps[0].tool_call.parameters == {"command": "mkdir -p /workspace/todo-app"}
    assert t.steps[0].tool_call.id == "toolu_01W9Z8jBctr8X2frZV9p1RYs"
    assert t.steps[1].tool_call.parameters["command"] == "create"
    assert t.steps[1].tool_call.parameters["path"] == "/workspace/todo-app/index.html"
    assert t.steps[3].tool_call.parameters == {"command": "cd /workspace/todo-app && python3 -m http.server 8000"}
    # observation 8: exit code 0, success true; observation 14: exit code -1, success false
    assert t.steps[0].observation.exit_code == 0 and t.steps[0].metadata["success"] is True
    assert t.steps[3].observation.exit_code == -1 and t.steps[3].metadata["success"] is False
    assert t.steps[3].observation.output == "Serving HTTP on 0.0.0.0 port 8000 (http://0.0.0.0:8000/) ..."
    assert t.steps[1].observation.output.startswith(
        "--- /workspace/todo-app/index.html\n+++ /workspace/todo-app/index.html"
    )
    assert t.steps[4].tool_call.parameters["message"].startswith("I've created a complete Vue.js todo application")
    assert t.task.description.startswith("I want to create a VueJS app that allows me to:\n* See all the items")
    # four model responses: prompt 3439 + 3601 + 4769 + 5488, completion 104 + 1142 + 693 + 85
    assert t.usage.prompt_tokens == 17297 and t.usage.completion_tokens == 2024 and t.usage.api_calls == 4
    assert t.model == "claude-3-5-sonnet-20241022"
    # the last agent_state_changed says awaiting_user_input; nothing judged the run
    assert t.outcome.exit_status == "awaiting_user_input" and t.outcome.success is None
