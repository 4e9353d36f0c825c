"""Every published log in shared/data/real converts; expectations read off the files by hand.

Each test names the source lines it checks against. Step counts follow the mapping in the
adapter docstrings: one step per agent decision (tool call or text reply), observations
attached to the call they answer.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from agentrecorder import convert_file, iter_convert
from agentrecorder.convert import FileResult


def test_swe_agent_function_calling(real):
    (t,) = convert_file(real("swe-agent_function_calling_simple.traj"))
    # history: 5 assistant messages with one tool call each (find_file, open, edit, bash, submit)
    assert len(t.steps) == 5
    assert t.tool_names == ["find_file", "open", "edit", "bash", "submit"]
    assert t.steps[0].tool_call.parameters == {"file_name": "missing_colon.py"}
    assert t.steps[0].tool_call.id == "call_PbWErNIge3YTrli3fiVvmIid"
    assert t.steps[1].tool_call.parameters == {"path": "tests/missing_colon.py"}
    assert t.steps[2].tool_call.parameters == {
        "search": "def division(a: float, b: float) -> float",
        "replace": "def division(a: float, b: float) -> float:",
    }
    assert t.steps[3].tool_call.parameters == {"command": "python tests/missing_colon.py"}
    assert t.steps[4].tool_call.parameters == {}
    # tool message answering call_5O339epJ3rKjEal3Kuvpj9bM starts with the script's output
    assert t.steps[3].observation.output.startswith("8.2\n")
    assert t.steps[0].thought.startswith("The `SyntaxError` in `missing_colon.py` is likely due to a missing colon")
    assert "diff --git a/tests/missing_colon.py" in t.steps[4].observation.output
    assert "SyntaxError: invalid syntax" in t.task.description
    # no info block in this file: the run ends with submit, nothing judged it
    assert t.outcome.exit_status == "submitted" and t.outcome.success is None
    assert t.usage is None


def test_swe_agent_text_actions(real):
    (t,) = convert_file(real("swe-agent_test-repo-i1.traj"))
    # trajectory[]: 5 entries; actions find_file / open / edit 4:4 / python / submit
    assert len(t.steps) == 5
    assert t.tool_names == ["find_file", "open", "edit", "bash", "submit"]
    assert t.steps[0].tool_call.parameters == {"file_name": "missing_colon.py"}
    assert t.steps[1].tool_call.parameters == {"path": "tests/missing_colon.py"}
    assert t.steps[2].tool_call.parameters == {
        "start_line": 4,
        "end_line": 4,
        "replacement": "def division(a: float, b: float) -> float:",
    }
    assert t.steps[3].tool_call.parameters == {"command": "python tests/missing_colon.py"}
    assert t.steps[3].observation.output == "8.2\n"
    assert t.steps[2].metadata["state"] == {
        "open_file": "/klieret__swe-agent-test-repo/tests/missing_colon.py",
        "working_dir": "/klieret__swe-agent-test-repo",
    }
    assert t.steps[0].thought.startswith("The issue indicates that there is a syntax error in the `missing_colon.py`")
    # info: exit_status submitted, submission = the diff, model_stats
    assert t.outcome.exit_status == "submitted" and t.outcome.terminated and not t.outcome.truncated
    assert t.outcome.patch.startswith("\ndiff --git a/tests/missing_colon.py b/tests/missing_colon.py")
    assert "+def division(a: float, b: float) -> float:" in t.outcome.patch
    assert t.usage.prompt_tokens == 52861 and t.usage.completion_tokens == 326
    assert t.usage.total_tokens == 52861 + 326
    assert t.usage.cost_usd == pytest.approx(0.53839) and t.usage.api_calls == 5
    assert t.metadata["environment"] == "swe_main"
    # the demonstration message (is_demo) is not the task; the third history message is
    assert t.task.description.startswith("We're currently solving the following issue")


def test_mini_swe_agent_messages(real):
    (t,) = convert_file(real("mini-swe-agent_local.traj.json"))
    # two assistant messages, each with one ```mswea_bash_command block
    assert len(t.steps) == 2
    assert t.steps[0].tool_call.name == "bash"
    assert t.steps[0].tool_call.parameters == {"command": "echo 'hello world'"}
    assert t.steps[0].thought == "Here be some dummy command:"
    assert t.steps[0].observation.output == "hello world\n" and t.steps[0].observation.exit_code == 0
    assert t.steps[1].tool_call.parameters == {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}
    assert t.steps[1].observation.output == "" and t.steps[1].observation.exit_code is None
    assert t.task.description.startswith("Please solve this issue: Blah blah blah")
    assert t.metadata["system_prompt"].startswith("You are a helpful assistant that can interact with a computer.")
    assert t.outcome.exit_status == "Submitted" and t.outcome.terminated


def test_openhands_event_stream(real):
    (t,) = convert_file(real("openhands_basic.json"))
    # events: user message (id 0), edit action (3) + its observation (4), finish (5)
    assert len(t.steps) == 2
    assert t.tool_names == ["str_replace_editor", "finish"]
    create = t.steps[0].tool_call
    assert create.id == "toolu_017nBp7UfiGqyrA7j77HgtFP"
    assert create.parameters["command"] == "create"
    assert create.parameters["path"] == "/workspace/game_2048.py"
    assert create.parameters["file_text"].startswith("import random\nimport keyboard\n\nclass Game2048:")
    assert t.steps[0].thought == (
        "I'll help you create a simple 2048 game in Python. I'll use the str_replace_editor to create the file."
    )
    assert t.steps[0].observation.output.startswith("--- /workspace/game_2048.py\n+++ /workspace/game_2048.py")
    # timestamps 22:45:13.764487 (action) and 22:45:13.801384 (observation)
    start = datetime(2025, 1, 27, 22, 45, 13, 764487, tzinfo=timezone.utc).timestamp()
    assert t.steps[0].timestamp == pytest.approx(start)
    assert t.steps[0].duration_s == pytest.approx(0.036897, abs=1e-6)
    assert t.steps[1].tool_call.parameters == {}
    assert t.steps[1].thought.startswith("I've created a simple implementation of the 2048 game")
    assert t.task.description == (
        "Please create a simple 2048 game. No need to run it. Please finish the interaction after your finish coding."
    )
    assert t.model == "claude-3-5-sonnet-20241022"
    # two model responses: usage 3486/1135 and 4646/177
    assert t.usage.prompt_tokens == 3486 + 4646 and t.usage.completion_tokens == 1135 + 177
    assert t.usage.api_calls == 2
    assert t.outcome.exit_status == "finished" and t.outcome.terminated and t.outcome.success is None


def test_tau_bench_records(real):
    path = real("tau-bench_gpt-4o-airline_tasks0-4.json")
    result = FileResult(path)
    trajectories = list(iter_convert(path, result=result))
    assert result.format == "openai-chat"
    assert len(trajectories) == 20
    # records are task 0..4 for trial 0, then trial 1, ...; rewards 1.0 only at index 6 and 12
    assert [t.id for t in trajectories[:6]] == ["0-trial0", "1-trial0", "2-trial0", "3-trial0", "4-trial0", "0-trial1"]
    assert [i for i, t in enumerate(trajectories) if t.outcome.success] == [6, 12]
    assert all(t.outcome.score == (1.0 if i in (6, 12) else 0.0) for i, t in enumerate(trajectories))

    # record 0: 32 messages, 7 assistant text replies and 8 tool calls
    first = trajectories[0]
    assert len(first.steps) == 7 + 8
    assert first.tool_names[:4] == ["respond", "respond", "get_user_details", "search_direct_flight"]
    assert first.steps[2].tool_call.parameters == {"user_id": "mia_li_3668"}
    assert first.task.description == "Hi! I'm looking to book a flight from New York to Seattle on May 20th."
    assert first.task.metadata["user_id"] == "mia_li_3668"

    # record 6 (task 1, trial 1), read message by message
    t = trajectories[6]
    assert t.id == "1-trial1" and t.task.id == "1"
    assert t.tool_names == [
        "respond",
        "get_user_details",
        "respond",
        "get_reservation_details",
        "get_reservation_details",
        "get_reservation_details",
        "respond",
        "respond",
        "cancel_reservation",
        "respond",
    ]
    assert t.steps[1].tool_call.parameters == {"user_id": "olivia_gonzalez_2305"}
    assert t.steps[1].tool_call.id == "call_MY94XAcnfHzfAZcVHqt5FRRQ"
    assert t.steps[1].observation.output.startswith('{"name": {"first_name": "Olivia", "last_name": "Gonzalez"}')
    assert [s.tool_call.parameters["reservation_id"] for s in t.steps[3:6]] == ["Z7GOZK", "K67C4W", "THY2DG"]
    assert t.steps[8].tool_call.parameters == {"reservation_id": "Z7GOZK"}
    assert t.steps[0].tool_call.parameters == {
        "message": "I can help you with that. Could you please provide your user ID and reservation ID?"
    }
    # the user's answer to a reply is that reply's observation
    assert t.steps[0].observation.output.startswith("I know my user ID, it's olivia_gonzalez_2305.")
    assert t.steps[9].observation.output.endswith("###STOP###")
    assert t.outcome.success is True and t.outcome.score == 1.0
    assert t.metadata["system_prompt"].startswith("# Airline Agent Policy")
    assert t.task.metadata["expected_actions"] == [
        {"name": "cancel_reservation", "kwargs": {"reservation_id": "Z7GOZK"}}
    ]


def test_tau_bench_step_counts_match_the_messages(real_json, real):
    """Every record: steps = assistant text replies + tool calls, counted straight from the file."""
    records = real_json("tau-bench_gpt-4o-airline_tasks0-4.json")
    trajectories = convert_file(real("tau-bench_gpt-4o-airline_tasks0-4.json"))
    for record, t in zip(records, trajectories, strict=True):
        calls = [
            c["function"]["name"] for m in record["traj"] if m["role"] == "assistant" for c in m.get("tool_calls") or []
        ]
        replies = [m for m in record["traj"] if m["role"] == "assistant" and not m.get("tool_calls")]
        assert len(t.steps) == len(calls) + len(replies)
        assert [n for n in t.tool_names if n != "respond"] == calls


# (file, steps, tools of the first step, history index of the flagged mistake or None)
WHO_AND_WHEN = [
    ("algorithm-generated_1.json", 4, "execute_code", 0),
    ("algorithm-generated_2.json", 5, "respond", 2),
    ("algorithm-generated_3.json", 5, "respond", 4),
    ("algorithm-generated_4.json", 7, "respond", 2),
    ("algorithm-generated_5.json", 7, "respond", 3),
    ("algorithm-generated_6.json", 7, "respond", 1),
    ("algorithm-generated_7.json", 7, "respond", 5),
    ("algorithm-generated_8.json", 6, "execute_code", 4),
    ("algorithm-generated_9.json", 4, "respond", 1),
    ("algorithm-generated_10.json", 7, "respond", 5),
]


@pytest.mark.parametrize(("name", "steps", "first_tool", "mistake"), WHO_AND_WHEN)
def test_who_and_when_files(real, name, steps, first_tool, mistake):
    # steps = messages not from Computer_terminal (its messages are observations)
    (t,) = convert_file(real(f"who-and-when/{name}"))
    assert len(t.steps) == steps
    assert t.steps[0].tool_call.name == first_tool
    assert t.outcome.success is False  # is_correct is false in all ten files
    flagged = [s.metadata["history_index"] for s in t.steps if s.metadata.get("mistake")]
    assert flagged == [mistake]


# (file, history index of the first message with code, its language, first code line, exit code
# reported by the Computer_terminal message after it); files 4 and 9 contain no code at all
FIRST_CODE = [
    ("algorithm-generated_1.json", 0, "python", "import pandas as pd", 0),
    ("algorithm-generated_2.json", 2, "python", "# Let's create a sample dataset in a CSV format for demonstration", 0),
    ("algorithm-generated_3.json", 2, "sh", "# Install tesseract", 124),
    ("algorithm-generated_4.json", None, None, None, None),
    ("algorithm-generated_5.json", 1, "python", "import requests", 0),
    ("algorithm-generated_6.json", 1, "python", "from functions import arxiv_search", 0),
    ("algorithm-generated_7.json", 1, "python", "from functions import arxiv_search", 0),
    ("algorithm-generated_8.json", 0, "python", "import pandas as pd", 1),
    ("algorithm-generated_9.json", None, None, None, None),
    ("algorithm-generated_10.json", 5, "python", "population_seattle = 737,015", 1),
]


@pytest.mark.parametrize(("name", "history_index", "language", "first_line", "exit_code"), FIRST_CODE)
def test_who_and_when_code_steps(real, name, history_index, language, first_line, exit_code):
    (t,) = convert_file(real(f"who-and-when/{name}"))
    code_steps = [s for s in t.steps if s.tool_call.name == "execute_code"]
    if history_index is None:
        assert code_steps == []
        return
    step = code_steps[0]
    assert step.metadata["history_index"] == history_index
    block = step.tool_call.parameters["code_blocks"][0]
    assert block["language"] == language
    assert block["code"].strip().splitlines()[0] == first_line
    assert step.observation.exit_code == exit_code


def test_who_and_when_file_1_in_detail(real):
    (t,) = convert_file(real("who-and-when/algorithm-generated_1.json"))
    assert t.id == t.task.id == "4d51c4bf-4b0e-4f3d-897b-3f6687a7d9f2"
    assert t.task.metadata == {"ground_truth": "8", "level": "2"}
    assert [s.metadata["agent"] for s in t.steps] == [
        "Excel_Expert",
        "BusinessLogic_Expert",
        "DataVerification_Expert",
        "DataVerification_Expert",
    ]
    (block,) = t.steps[0].tool_call.parameters["code_blocks"]
    assert block["language"] == "python"
    assert "data = pd.read_excel(file_path)" in block["code"]
    assert t.steps[0].observation.exit_code == 0
    assert t.steps[0].observation.output.startswith("exitcode: 0 (execution succeeded)\nCode output: Index(['ID'")
    assert t.steps[1].observation.output == "exitcode: 0 (execution succeeded)\nCode output: 4\n"
    assert t.steps[3].tool_call.parameters == {"message": "TERMINATE"}
    assert t.metadata["mistake_agent"] == "Excel_Expert"
    assert t.metadata["mistake_reason"].startswith("The code failed to handle edge cases")


def test_whole_folder_converts_in_one_batch(real_logs_folder, tmp_path):
    from agentrecorder import convert_paths
    from knowlyrcore.jsonl import read_trajectories

    folder = real_logs_folder
    report, _ = convert_paths([folder], tmp_path / "all.jsonl")
    assert not report.failed
    # 4 single-episode files + 20 tau-bench records + 10 who-and-when files
    assert report.written == 4 + 20 + 10
    assert len(list(read_trajectories(tmp_path / "all.jsonl"))) == report.written
    assert {f.format for f in report.files} == {
        "openhands",
        "swe-agent",
        "mini-swe-agent",
        "openai-chat",
        "who-and-when",
    }
