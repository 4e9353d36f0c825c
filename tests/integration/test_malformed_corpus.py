"""Every command of every package that reads a file refuses the same malformed corpus the same way.

The corpus (``knowlyrcore.testing.malformed_corpus``): empty, truncated, binary, UTF-16, Latin-1,
JSON nested 100,000 deep, a 200 MB line, NaN, wrong field types, a bad line after good ones. The
answer (``check_refusal``): exit code 2, one ``error:`` line naming the file and, for the bad line,
its number; no traceback, nothing on stdout, and an existing output file left as it was.

In the table of every command the bad line is line 5,000: that proves the number is the line a
reader got to, at a tenth of the cost (it is ~40 commands). Line 50,000 runs once per file format
(``test_a_bad_line_50000_lines_in_is_named``): what a reader does per good line stays cheap at scale.

Commands run in-process through each package's ``main(argv)`` (what its console script calls), so
the whole table costs one interpreter; ``test_console_scripts_exit_2`` runs each installed script
once as a real process.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from knowlyrcore.testing import MALFORMED_KINDS, check_refusal, malformed_corpus

pytestmark = pytest.mark.integration

TRAJECTORY = {
    "schema_version": "1.0",
    "id": "t-1",
    "task": {"id": "task-1", "description": "list the files", "domain": "coding"},
    "agent": "corpus",
    "steps": [
        {
            "index": 0,
            "tool_call": {"name": "bash", "parameters": {"command": "ls"}},
            "observation": {"output": "a.py", "exit_code": 0},
        },
        {"index": 1, "tool_call": {"name": "submit", "parameters": {}}, "observation": {"output": "ok"}},
    ],
    "outcome": {"success": True, "score": 1.0},
}
# (good record, a record that parses but breaks the format) per file format
FORMATS = {
    "trajectory": (TRAJECTORY, {"schema_version": "1.0", "steps": [{"tool_call": "ls"}], "outcome": 7}),
    "task": ({"id": "task-1", "description": "list the files", "domain": "coding"}, {"id": ["x"], "max_steps": "many"}),
    "sft": ({"instruction": "say hi", "response": "hi"}, {"instruction": 5, "steps": "none"}),
    "dpo": ({"prompt": "say hi", "chosen": "hi", "rejected": "no"}, {"prompt": 3, "chosen": {}, "rejected": None}),
    "grpo": (
        {
            "task_id": "t",
            "prompt": "say hi",
            "trajectories": [{"response": "hi", "reward": 1.0}, {"response": "no", "reward": 0.0}],
        },
        {"task_id": "t", "prompt": "p", "trajectories": "all of them"},
    ),
    "actions": ({"tool": "bash", "params": {"command": "ls"}}, {"tool": 5, "params": "ls"}),
    "labels": ({"trajectory_id": "t-1", "step_index": 0, "score": 1.0}, {"trajectory_id": 5, "score": "high"}),
    "tool": (
        {"name": "shop_cancel_order", "description": "Cancel an order.", "parameters": {"type": "object"}},
        {"name": ["shop"], "description": 7, "parameters": "none"},
    ),
    "preferences": (
        {"task_id": "task-1", "chosen": TRAJECTORY, "rejected": TRAJECTORY, "margin": 0.5},
        {"task_id": "task-1", "chosen": "the first", "rejected": [], "margin": "big"},
    ),
    "calibration": (
        {"weights": {"goal_progress": 1.0}, "slope": 1.0, "intercept": 0.0},
        {"weights": "all", "slope": "steep"},
    ),
    "atif": (
        {
            "schema_version": "ATIF-v1.5",
            "session_id": "s-1",
            "agent": {"name": "corpus", "version": "1.0"},
            "steps": [
                {"step_id": 1, "source": "user", "message": "list the files"},
                {
                    "step_id": 2,
                    "source": "agent",
                    "message": "",
                    "tool_calls": [{"tool_call_id": "c1", "function_name": "bash", "arguments": {"command": "ls"}}],
                    "observation": {"results": [{"source_call_id": "c1", "content": "a.py"}]},
                },
            ],
        },
        {"schema_version": "ATIF-v1.5", "session_id": 7, "agent": "corpus", "steps": [{"source": 5}]},
    ),
}
FORMAT_KINDS = ("truncated", "utf16", "latin1", "nan", "wrong_types", "bad_line")
BAD_LINE = 5_000  # the bad line's number in the table of every command
SHARED_KINDS = ("empty", "binary", "deep", "long_line")  # the same bytes whatever the format


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, dict[str, Path]]:
    """``corpus[format][kind]``: the format-free files are written once and shared."""
    root = tmp_path_factory.mktemp("malformed")
    shared = malformed_corpus(root / "shared", *FORMATS["trajectory"], kinds=SHARED_KINDS)
    files = {}
    for name, (good, wrong) in FORMATS.items():
        files[name] = {**shared, **malformed_corpus(root / name, good, wrong, kinds=FORMAT_KINDS, bad_line=BAD_LINE)}
        (root / name / "good.jsonl").write_text(json.dumps(good) + "\n")
        files[name]["good"] = root / name / "good.jsonl"
    return files


# package module, argv with {F} = the malformed file, {OUT} = an output file that must survive,
# {GOOD} = a good file of the same format, {TASK} = a good task file, {DIR} = a fresh folder
COMMANDS = {
    "core validate": ("knowlyrcore.cli", "trajectory", ["validate", "{F}"]),
    "core tools search": ("knowlyrcore.cli", "tool", ["tools", "search", "{F}", "cancel an order"]),
    "core tools index": ("knowlyrcore.cli", "trajectory", ["tools", "index", "--from-data", "{F}", "-o", "{OUT}"]),
    "recorder convert": ("agentrecorder.cli", "trajectory", ["convert", "{F}", "-o", "{OUT}"]),
    "recorder validate": ("agentrecorder.cli", "trajectory", ["validate", "{F}"]),
    "recorder stats": ("agentrecorder.cli", "trajectory", ["stats", "{F}"]),
    "recorder show": ("agentrecorder.cli", "trajectory", ["show", "{F}"]),
    "recorder view": ("agentrecorder.cli", "trajectory", ["view", "{F}", "-o", "{OUT}"]),
    "recorder export atif": ("agentrecorder.cli", "trajectory", ["export", "--to", "atif", "{F}", "-o", "{OUT}"]),
    "recorder export adp": ("agentrecorder.cli", "trajectory", ["export", "--to", "adp", "{F}", "-o", "{OUT}"]),
    "recorder export from atif": ("agentrecorder.cli", "atif", ["export", "--to", "adp", "{F}", "-o", "{OUT}"]),
    "recorder validate atif": ("agentrecorder.cli", "atif", ["validate", "-f", "atif", "{F}"]),
    "reward score": ("agentreward.cli", "trajectory", ["score", "{F}", "-o", "{OUT}"]),
    "reward score stdout": ("agentreward.cli", "trajectory", ["score", "{F}"]),
    "reward eval": ("agentreward.cli", "trajectory", ["eval", "{F}", "-o", "{OUT}"]),
    "reward pairs": ("agentreward.cli", "trajectory", ["pairs", "{F}", "-o", "{OUT}"]),
    "reward calibrate": ("agentreward.cli", "trajectory", ["calibrate", "{F}", "-o", "{OUT}"]),
    "reward calibrate labels": ("agentreward.cli", "labels", ["calibrate", "{TRAJ}", "--labels", "{F}", "-o", "{OUT}"]),
    "reward score calibration": (
        "agentreward.cli",
        "calibration",
        ["score", "{TRAJ}", "-o", "{OUT}", "--calibration", "{F}"],
    ),
    "hub export sft": ("trajectoryhub.cli", "trajectory", ["export", "--format", "sft", "-t", "{F}", "-o", "{OUT}"]),
    "hub export dpo": ("trajectoryhub.cli", "trajectory", ["export", "--format", "dpo", "-t", "{F}", "-o", "{OUT}"]),
    "hub export grpo": ("trajectoryhub.cli", "trajectory", ["export", "--format", "grpo", "-t", "{F}", "-o", "{OUT}"]),
    "hub export dpo preferences": (
        "trajectoryhub.cli",
        "preferences",
        ["export", "--format", "dpo", "-t", "{TRAJ}", "-p", "{F}", "-o", "{OUT}"],
    ),
    "hub collect tasks": (
        "trajectoryhub.cli",
        "task",
        [
            "collect",
            "knowlyr/retail",
            "--endpoint",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--tasks",
            "{F}",
            "-o",
            "{OUT}",
        ],
    ),
    "hub pipeline": ("trajectoryhub.cli", "trajectory", ["pipeline", "{F}", "-o", "{DIR}/o"]),
    "hub dedup": ("trajectoryhub.cli", "trajectory", ["dedup", "-t", "{F}", "-o", "{OUT}"]),
    "hub store add": ("trajectoryhub.cli", "trajectory", ["store", "add", "{F}", "--db", "{DIR}/o/store.db"]),
    "hub evaluate runs": ("trajectoryhub.cli", "trajectory", ["evaluate", "-t", "{F}"]),
    "hub compare": ("trajectoryhub.cli", "trajectory", ["compare", "-t", "{GOOD}", "-t", "{F}"]),
    "hub evaluate tasks": (
        "trajectoryhub.cli",
        "task",
        ["evaluate", "--policy", "expert", "--tasks", "{F}", "--env", "knowlyr/retail", "-o", "{OUT}"],
    ),
    "sandbox replay": ("agentsandbox.cli", "trajectory", ["replay", "{F}", "--backend", "local"]),
    "sandbox run task": ("agentsandbox.cli", "task", ["run", "{F}", "--actions", "{ACTIONS}", "--output", "{OUT}"]),
    "sandbox run actions": ("agentsandbox.cli", "actions", ["run", "{TASK}", "--actions", "{F}", "--output", "{OUT}"]),
    "trainer sft": (
        "agenttrainer.cli",
        "sft",
        ["sft", "--train-file", "{F}", "--model", "{DIR}/m", "--output-dir", "{DIR}/o"],
    ),
    "trainer dpo": (
        "agenttrainer.cli",
        "dpo",
        ["dpo", "--train-file", "{F}", "--model", "{DIR}/m", "--output-dir", "{DIR}/o"],
    ),
    "trainer grpo": (
        "agenttrainer.cli",
        "grpo",
        ["grpo", "--train-file", "{F}", "--model", "{DIR}/m", "--output-dir", "{DIR}/o"],
    ),
    "trainer eval": ("agenttrainer.cli", "sft", ["eval", "--model", "{DIR}/m", "--eval-file", "{F}"]),
    "trainer retriever library": (
        "agenttrainer.cli",
        "tool",
        ["retriever", "--library", "{F}", "--train-file", "generated", "--output-dir", "{DIR}/o"],
    ),
    "trainer retriever pairs": (
        "agenttrainer.cli",
        "trajectory",
        ["retriever", "--library", "generated", "--train-file", "{F}", "--output-dir", "{DIR}/o"],
    ),
    "trainer retriever-search": ("agenttrainer.cli", "tool", ["retriever-search", "--library", "{F}", "find an order"]),
    "trainer grpo online": (
        "agenttrainer.cli",
        "task",
        [
            "grpo",
            "--online",
            "--env",
            "knowlyr/retail",
            "--tasks",
            "{F}",
            "--model",
            "{DIR}/m",
            "--output-dir",
            "{DIR}/o",
        ],
    ),
}


PRECIOUS = b'{"precious": "an earlier result that must survive"}\n'


def _argv(template: list[str], values: dict[str, str]) -> list[str]:
    return [part.format(**values) for part in template]


def _refusal(command: str, bad: Path, corpus, tmp_path: Path, capsys) -> str:
    """Run ``command`` on the malformed file ``bad``; check it refused the knowlyr way, wrote
    nothing and left an existing output file alone; return its error line."""
    module, fmt, template = COMMANDS[command]
    out = tmp_path / "existing-output.jsonl"
    out.write_bytes(PRECIOUS)
    values = {
        "F": str(bad),
        "OUT": str(out),
        "GOOD": str(corpus[fmt]["good"]),
        "DIR": str(tmp_path),
        "TASK": str(corpus["task"]["good"]),
        "TRAJ": str(corpus["trajectory"]["good"]),
        "ACTIONS": str(corpus["actions"]["good"]),
    }
    code = importlib.import_module(module).main(_argv(template, values))
    captured = capsys.readouterr()
    line = check_refusal(code, captured.out, captured.err, bad, outputs={out: PRECIOUS})
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir()), "a run wrote output"
    return line


@pytest.mark.parametrize("kind", sorted(MALFORMED_KINDS))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_file_reading_command_refuses_malformed_input(command, kind, corpus, tmp_path, capsys):
    line = _refusal(command, corpus[COMMANDS[command][1]][kind], corpus, tmp_path, capsys)
    if kind == "bad_line" and command not in NO_LINE_NUMBER:
        assert f":{BAD_LINE}:" in line, line


# commands whose refusal of the bad-line file rightly names no line 5,000
NO_LINE_NUMBER = {
    "recorder convert": "it takes agent logs: a trajectory on line 1 is no log format it knows",
    "reward score calibration": "a calibration file is one JSON document, not lines",
}


@pytest.fixture(scope="module")
def bad_line_50000(tmp_path_factory) -> dict[str, Path]:
    """Per file format, 49,999 good records and a broken line 50,000."""
    root = tmp_path_factory.mktemp("bad-line-50000")
    return {
        name: malformed_corpus(root / name, good, wrong, kinds=["bad_line"])["bad_line"]
        for name, (good, wrong) in FORMATS.items()
    }


# one command per line-based file format: the first the table lists for it
FIRST_COMMAND_PER_FORMAT = {
    fmt: command for command, (_, fmt, _) in reversed(sorted(COMMANDS.items())) if command not in NO_LINE_NUMBER
}


@pytest.mark.parametrize("fmt", sorted(FIRST_COMMAND_PER_FORMAT))
def test_a_bad_line_50000_lines_in_is_named(fmt, bad_line_50000, corpus, tmp_path, capsys):
    line = _refusal(FIRST_COMMAND_PER_FORMAT[fmt], bad_line_50000[fmt], corpus, tmp_path, capsys)
    assert ":50000:" in line, line


SCRIPTS = ["knowlyr-core", "knowlyr-recorder", "knowlyr-reward", "knowlyr-hub", "knowlyr-sandbox", "knowlyr-trainer"]
SCRIPT_COMMANDS = {
    "knowlyr-core": ["validate", "{F}"],
    "knowlyr-recorder": ["validate", "{F}"],
    "knowlyr-reward": ["score", "{F}", "-o", "{OUT}"],
    "knowlyr-hub": ["evaluate", "-t", "{F}"],
    "knowlyr-sandbox": ["replay", "{F}"],
    "knowlyr-trainer": ["sft", "--train-file", "{F}", "--model", "{DIR}/m"],
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_console_scripts_exit_2(script, corpus, tmp_path):
    """The installed entry points (not only ``main``) print one line and exit 2."""
    exe = shutil.which(script, path=str(Path(sys.executable).parent))
    assert exe, f"{script} is not installed beside {sys.executable}"
    bad = corpus["sft" if script == "knowlyr-trainer" else "trajectory"]["utf16"]
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"keep\n")
    argv = _argv(SCRIPT_COMMANDS[script], {"F": str(bad), "OUT": str(out), "DIR": str(tmp_path)})
    done = subprocess.run([exe, *argv], capture_output=True, text=True, timeout=300)
    line = check_refusal(done.returncode, done.stdout, done.stderr, bad, outputs={out: b"keep\n"})
    assert "UTF-16" in line, line
