"""``knowlyr-hub tasks mcp`` and ``trajectoryhub.mcp_tasks``: tasks a model writes for any MCP server.

The generator is a real loopback endpoint: ``ScriptedChatServer`` (its replies scripted, so the
tasks written are known exactly, including the malformed proposals that must be dropped and
counted) and, once, ``knowlyr-trainer serve`` of a tiny random model, whose garbage must end the
command with one line and exit code 2. The tool lists come from the real ``mcp-server-time`` and
``mcp-server-git`` processes (integration), or, for the generation loop alone, from a copy of
mcp-server-time's list.

    pytest packages/hub/tests/test_tasks_from_mcp_server.py -m "integration or not integration"
"""

from __future__ import annotations

import doctest
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections import Counter

import pytest

from knowlyrcore import TaskInfo
from knowlyrcore.endpoint import ChatEndpoint, EndpointError
from knowlyrcore.testing import ScriptedChatServer, require, require_module
from trajectoryhub import mcp_tasks
from trajectoryhub.cli import main
from trajectoryhub.mcp_tasks import (
    MAX_REPLY_CHARS,
    GenerationError,
    TaskGenerator,
    check_proposal,
    generate_tasks,
    normalized,
    proposals_in,
)

#: mcp-server-time's tools as it lists them (descriptions shortened).
TIME_TOOLS = [
    {
        "name": "get_current_time",
        "description": "Get current time in a specific timezone",
        "input_schema": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
    },
    {
        "name": "convert_time",
        "description": "Convert time between timezones",
        "input_schema": {
            "type": "object",
            "properties": {n: {"type": "string"} for n in ("source_timezone", "time", "target_timezone")},
            "required": ["source_timezone", "time", "target_timezone"],
        },
    },
]
TOKYO = "What time is it in Tokyo right now?"
LONDON = "Convert 14:30 from Europe/London to America/New_York."
KOLKATA = "What is the UTC offset of Asia/Kolkata?"
INSTRUCTIONS = "Our users are travellers planning calls across time zones."

#: Three replies to a run asking for 4 tasks (3 attempts allowed): 3 tasks accepted, 6 proposals
#: and one reply dropped.
REPLIES = [
    "Here are the tasks:\n```json\n"
    + json.dumps(
        [
            {
                "description": TOKYO,
                "rubric": "Reports the time get_current_time gives for Asia/Tokyo.",
                "tools": ["get_current_time"],
            },
            {
                "description": LONDON,
                "rubric": "Uses convert_time.",
                "answer_contains": ["09:30"],
                "tools": ["convert_time"],
            },
            {"description": "Use get_weather to check Paris.", "rubric": "Gives the weather."},  # unknown tool
            {"description": "what time is it in  TOKYO right now", "rubric": "Same again."},  # duplicate
        ]
    )
    + "\n```",
    "I cannot help with that.",  # no JSON at all
    '{"tasks": [{"description": "", "rubric": "x"}, {"description": "Is it day in Sydney?", "rubric": NaN}, '
    + json.dumps({"description": KOLKATA, "rubric": "States +05:30.", "answer_contains": ["+05:30"]})
    + ', {"description": "Which is later now: Berlin or Lisbon?", "rubric": "Compares.", "answer_contains": ["berlin"]}, 7, '
    + json.dumps({"description": "x" * 3000, "rubric": "y"})
    + "]}",
]
DROPPED = Counter(
    {
        "unknown tool": 1,
        "duplicate": 1,
        "reply without JSON": 1,
        "description missing or not text": 1,
        "answer_contains item given in the request": 1,
        "description over 2000 characters": 1,
    }
)


def expected_task(description, rubric, facts=(), **where):
    metadata = {
        "rubric": rubric,
        **({"answer_contains": list(facts)} if facts else {}),
        "template": "generated",
        **where,
    }
    digest = hashlib.sha256(normalized(description).encode()).hexdigest()[:12]
    return {"id": f"mcp-{digest}", "description": description, "metadata": metadata}


def expected_tasks(**where):
    return [
        expected_task(TOKYO, "Reports the time get_current_time gives for Asia/Tokyo.", **where),
        expected_task(LONDON, "Uses convert_time.", ["09:30"], **where),
        expected_task(KOLKATA, "States +05:30.", ["+05:30"], **where),
    ]


def user_prompt(request):
    return request["body"]["messages"][1]["content"]


# -- reading replies and checking proposals ---------------------------------------------------------


def test_the_module_examples_hold():
    result = doctest.testmod(mcp_tasks)
    assert result.attempted >= 9 and result.failed == 0


def test_proposals_are_picked_out_of_any_reply():
    assert proposals_in('[{"a": 1}] then {"tasks": [{"b": 2}, [3]]} and [4') == [{"a": 1}, {"b": 2}, [3]]
    assert proposals_in('{"description": "t", "rubric": Infinity} {"description": "u"}') == [{"description": "u"}]
    assert proposals_in("```\nnot json {at all\n```") == []


@pytest.mark.parametrize(
    "hostile",
    [
        "[" * 200_000,  # nested past the parser's depth, at every start
        "{" * 200_000,
        '{"description": ' + "9" * 50_000 + "}",  # an int too long to convert
        '["\\ud800", "' + "a" * 100_000,  # an unterminated string
    ],
)
def test_a_hostile_reply_yields_nothing_and_never_raises(hostile):
    assert all(not check_proposal(p, ["git_log"])[0] for p in proposals_in(hostile))


@pytest.mark.parametrize(
    ("proposal", "reason"),
    [
        ([], "not an object"),
        ({"rubric": "r"}, "description missing or not text"),
        ({"description": "   ", "rubric": "r"}, "description missing or not text"),
        ({"description": ["a"], "rubric": "r"}, "description missing or not text"),
        ({"description": "a" * 2001, "rubric": "r"}, "description over 2000 characters"),
        ({"description": "clear \x1b[2J the screen", "rubric": "r"}, "description has unprintable characters"),
        ({"description": "d"}, "rubric missing or not text"),
        ({"description": "d", "rubric": "r" * 2001}, "rubric over 2000 characters"),
        ({"description": "d", "rubric": "r", "answer_contains": "abc"}, "answer_contains not a short list"),
        ({"description": "d", "rubric": "r", "answer_contains": ["x"] * 11}, "answer_contains not a short list"),
        ({"description": "d", "rubric": "r", "answer_contains": [1.5]}, "answer_contains item not a short text"),
        ({"description": "d", "rubric": "r", "answer_contains": [""]}, "answer_contains item not a short text"),
        (
            {"description": "Log of main", "rubric": "r", "answer_contains": ["MAIN"]},
            "answer_contains item given in the request",
        ),
        ({"description": "d", "rubric": "r", "tools": "git_log"}, "tools not a list of names"),
        ({"description": "d", "rubric": "r", "tools": ["git_blame"]}, "unknown tool"),
        ({"description": "Run `git_blame` on a.py", "rubric": "r"}, "unknown tool"),
    ],
)
def test_each_bad_proposal_is_refused_with_its_reason(proposal, reason):
    assert check_proposal(proposal, ["git_log", "git_show"]) == (None, reason)


def test_a_good_proposal_is_kept_stripped_and_file_names_are_not_tools():
    proposal = {
        "description": "  Show git_notes.md and src/git_util.py as of HEAD, with git_show. ",
        "rubric": " Shows both files. ",
        "answer_contains": [" def main "],
        "tools": ["git_show"],
        "difficulty": "easy",  # ignored
    }
    assert check_proposal(proposal, ["git_log", "git_show"]) == (
        {
            "description": "Show git_notes.md and src/git_util.py as of HEAD, with git_show.",
            "rubric": "Shows both files.",
            "answer_contains": ["def main"],
        },
        "",
    )


# -- the generation loop against a scripted endpoint -------------------------------------------------


def test_scripted_replies_give_exactly_the_valid_tasks_and_count_the_rest():
    lines = []
    with ScriptedChatServer() as server:
        server.replies += [{"content": reply} for reply in REPLIES]
        result = generate_tasks(
            TaskGenerator(server.base_url, "writer", max_retries=0),
            TIME_TOOLS,
            4,
            server="mcp-server-time",
            instructions=INSTRUCTIONS,
            progress=lines.append,
        )
    assert result.tasks == expected_tasks(server="mcp-server-time")
    assert [TaskInfo.model_validate(task).id for task in result.tasks] == [task["id"] for task in result.tasks]
    assert result.attempts == 3 and result.dropped == DROPPED
    assert lines == [
        "batch 1/3: 2 accepted, 2 dropped (2/4 tasks)",
        "batch 2/3: 0 accepted, 1 dropped (2/4 tasks)",
        "batch 3/3: 1 accepted, 3 dropped (3/4 tasks)",
    ]
    first, second, _ = server.requests
    assert [first["body"]["max_tokens"], second["body"]["max_tokens"]] == [300 + 350 * 4, 300 + 350 * 2]
    assert first["body"]["temperature"] == 0.8 and first["body"]["model"] == "writer"
    prompt = user_prompt(first)
    assert "- get_current_time: Get current time" in prompt and '"required": ["timezone"]' in prompt
    assert f"Instructions from the server's owner:\n{INSTRUCTIONS}" in prompt and "JSON array of 4 objects" in prompt
    assert "Already written" not in prompt
    assert f"Already written (write different ones):\n- {TOKYO}\n- {LONDON}\n" in user_prompt(second)


def test_the_run_stops_once_n_tasks_are_accepted():
    with ScriptedChatServer() as server:
        server.replies.append({"content": REPLIES[0]})
        result = generate_tasks(ChatEndpoint(server.base_url, "writer"), TIME_TOOLS, 1, url="http://mcp.example/mcp")
    assert result.tasks == expected_tasks(url="http://mcp.example/mcp")[:1]
    assert result.attempts == 1 and result.dropped == Counter() and result.dropped_summary() == "none"
    assert "JSON array of 1 objects" in user_prompt(server.requests[0])


def test_a_generator_that_never_proposes_a_valid_task_is_an_input_error():
    with ScriptedChatServer() as server:
        server.replies += [{"content": "no"}, {"content": "x" * (MAX_REPLY_CHARS + 1)}, {"content": "[1, 2]"}]
        with pytest.raises(GenerationError) as info:
            generate_tasks(ChatEndpoint(server.base_url, "writer"), TIME_TOOLS, 2, max_attempts=3)
    assert str(info.value) == (
        "the generator proposed no valid task in 3 attempts (dropped: 2 not an object, 1 reply without JSON, "
        "1 reply over 100000 characters); try a stronger model or clearer instructions"
    )
    assert info.value.exit_code == 2


def test_a_generator_that_fails_is_an_endpoint_error_naming_it():
    with ScriptedChatServer() as server, pytest.raises(EndpointError) as info:  # no reply scripted: HTTP 500
        url = server.base_url
        generate_tasks(TaskGenerator(url, "writer", max_retries=0), TIME_TOOLS, 1)
    assert str(info.value).startswith(f"task generator endpoint {url} failed: HTTP 500")


# -- the command -----------------------------------------------------------------------------------


def mcp_server(name):
    """The real server's command (on PATH or in $KNOWLYR_MCP_PATH), or a skip."""
    found = shutil.which(name) or shutil.which(name, path=os.environ.get("KNOWLYR_MCP_PATH", ""))
    require(found is not None, f"{name} is not installed (make install puts it in .venv-mcp)")
    require_module("agentsandbox.mcp", "listing a server's tools needs knowlyr-sandbox[mcp]")
    return name


def run_cli(argv, capsys):
    code = main(argv)
    return code, capsys.readouterr().err


def tasks_mcp(capsys, server, generator_url, out, *options):
    """``knowlyr-hub tasks mcp --server SERVER --generator-url URL [options] -o OUT``: exit code, stderr."""
    argv = ["tasks", "mcp", "--server", server, "--generator-url", generator_url, *options, "-o", str(out)]
    return run_cli(argv, capsys)


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        ([], "tasks mcp needs exactly one of --server CMD and --url URL"),
        (["--server", "a", "--url", "http://b/mcp"], "tasks mcp needs exactly one of --server CMD and --url URL"),
        (
            ["--server", "a", "--api-key-env", "KNOWLYR_TEST_UNSET_KEY"],
            "--api-key-env KNOWLYR_TEST_UNSET_KEY: the variable is not set",
        ),
    ],
)
def test_usage_errors_are_one_line_and_write_nothing(tmp_path, capsys, flags, problem):
    out = tmp_path / "t.jsonl"
    code, err = run_cli(["tasks", "mcp", *flags, "--generator-url", "http://127.0.0.1:9/v1", "-o", str(out)], capsys)
    assert code == 2 and err == f"error: {problem} (see 'knowlyr-hub tasks mcp --help')\n"
    assert not out.exists()


def test_without_knowlyr_sandbox_the_command_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "agentsandbox.mcp", None)  # as if knowlyr-sandbox were not installed
    code, err = tasks_mcp(capsys, "mcp-server-time", "http://127.0.0.1:9/v1", tmp_path / "t")
    assert code == 2 and err.startswith("error: knowlyr-hub tasks mcp needs the 'sandbox' extra: ")
    assert err.count("\n") == 1


def test_without_the_mcp_sdk_the_command_names_the_extra(tmp_path):
    """In a fresh process, so that knowlyr-sandbox's MCP modules are imported without the SDK."""
    require_module("agentsandbox", "knowlyr-sandbox is an optional sibling of the hub")
    code = (
        "import sys; sys.modules['mcp'] = None\n"
        "from trajectoryhub.cli import main\n"
        "sys.exit(main(['tasks', 'mcp', '--server', 'mcp-server-time', '--generator-url', 'http://127.0.0.1:9/v1', "
        f"'-o', {str(tmp_path / 't.jsonl')!r}]))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: knowlyr-hub tasks mcp needs the 'mcp' extra: ")


def test_the_suite_form_still_works_beside_the_subcommand(capsys):
    assert main(["tasks", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert "mcp " in help_text and "suite " in help_text
    code, err = run_cli(["tasks"], capsys)
    assert code == 2 and err.startswith("error: tasks needs a SUITE and -o FILE (or --list)")


@pytest.mark.integration
def test_tasks_for_the_real_time_server_from_scripted_replies(tmp_path, capsys, monkeypatch):
    server_command = mcp_server("mcp-server-time") + " --local-timezone UTC"
    out = tmp_path / "time.jsonl"
    monkeypatch.setenv("KNOWLYR_TEST_GENERATOR_KEY", "s3cret")
    with ScriptedChatServer() as generator:
        generator.replies += [{"content": reply} for reply in REPLIES]
        code, err = tasks_mcp(
            capsys,
            server_command,
            generator.base_url,
            out,
            "--generator-model",
            "writer",
            "--api-key-env",
            "KNOWLYR_TEST_GENERATOR_KEY",
            "-n",
            "4",
            "--instructions",
            INSTRUCTIONS,
            "--sandbox",
            "none",
        )
    assert code == 0, err
    assert [json.loads(line) for line in out.read_text().splitlines()] == expected_tasks(server=server_command)
    lines = err.splitlines()
    assert lines[0] == "2 tools on mcp-server-time --local-timezone UTC: get_current_time, convert_time"
    assert lines[-1] == (
        f"3 tasks (only 3 of 4 in 3 attempts) -> {out}; dropped proposals: 1 unknown tool, 1 duplicate, "
        "1 reply without JSON, 1 description missing or not text, 1 answer_contains item given in the request, "
        "1 description over 2000 characters"
    )
    request = generator.requests[0]
    assert request["authorization"] == "Bearer s3cret" and request["body"]["model"] == "writer"
    assert "IANA timezone name" in user_prompt(request)  # the schema as the real server gives it


@pytest.mark.integration
def test_tasks_for_the_real_git_server_record_the_workspace(tmp_path, capsys):
    server_command = mcp_server("mcp-server-git")
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "parser.py").write_text("def parse(text):\n    return text.split()\n")
    (repo / "README.md").write_text("# demo\n")
    git = ["git", "-c", "user.name=Ada", "-c", "user.email=ada@example.com", "-C", str(repo)]
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "Add parser"]):
        subprocess.run([*git, *args], check=True, env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"})
    out = tmp_path / "git.jsonl"
    reply = json.dumps(
        [
            {
                "description": "Who wrote the last commit in /workspace?",
                "rubric": "Names Ada.",
                "answer_contains": ["Ada"],
                "tools": ["git_log"],
            },
            {"description": "Run git_blame on src/parser.py", "rubric": "Blames."},
        ]
    )
    with ScriptedChatServer() as generator:
        generator.replies += [{"content": reply}]
        code, err = tasks_mcp(capsys, server_command, generator.base_url, out, "-n", "1", "--workspace-copy", str(repo))
    assert code == 0, err
    (task,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert task == expected_task(
        "Who wrote the last commit in /workspace?",
        "Names Ada.",
        ["Ada"],
        server="mcp-server-git",
        workspace={"copy": str(repo)},
    )
    prompt = user_prompt(generator.requests[0])
    assert "- git_log: Shows the commit logs" in prompt and "- git_diff_unstaged:" in prompt
    assert "a fresh copy of a git repository holding these files:\nREADME.md\nsrc/parser.py" in prompt


@pytest.mark.integration
def test_garbage_from_the_scripted_generator_ends_in_one_line_and_no_file(tmp_path, capsys):
    server_command = mcp_server("mcp-server-time")
    out = tmp_path / "time.jsonl"
    with ScriptedChatServer() as generator:
        generator.replies += [{"content": "lorem ipsum"}] * 3
        code, err = tasks_mcp(capsys, server_command, generator.base_url, out, "-n", "2")
    assert code == 2 and not out.exists()
    assert err.splitlines()[-1] == (
        "error: the generator proposed no valid task in 3 attempts (dropped: 3 reply without JSON); "
        "try a stronger model or clearer instructions"
    )


@pytest.mark.integration
def test_a_tiny_random_model_served_for_real_ends_in_a_clear_error(tmp_path, capsys):
    """``knowlyr-trainer serve`` of a random model answers garbage: exit 2, one error line, no
    traceback, no file."""
    server_command = mcp_server("mcp-server-time")
    require_module("agenttrainer", "the served model is knowlyr-trainer's `serve`")
    require_module("starlette", "serving needs knowlyr-trainer[serve] (in [dev])")
    from agenttrainer.models import build_tiny_model, save_model
    from agenttrainer.serving.background import ServerProcess

    checkpoint = str(save_model(*build_tiny_model(seed=0), tmp_path / "tiny"))
    out = tmp_path / "time.jsonl"
    with ServerProcess(checkpoint) as served:
        code, err = tasks_mcp(
            capsys, server_command, served.base_url, out, "--generator-model", served.model_name, "-n", "1"
        )
    assert code == 2 and not out.exists(), err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert errors == [err.splitlines()[-1]] and "Traceback" not in err
    assert errors[0].startswith("error: the generator proposed no valid task in 3 attempts (dropped: ")
