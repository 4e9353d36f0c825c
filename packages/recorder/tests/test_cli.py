"""The ``knowlyr-recorder`` command: subcommands end to end, through the installed script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentrecorder.cli import main


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "knowlyr-recorder"  # the installed console script
    command = [str(script)] if script.exists() else [sys.executable, "-m", "agentrecorder.cli"]
    proc = subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_formats_lists_every_adapter_in_detection_order():
    listed = json.loads(run("formats", "--json").stdout)
    names = [f["name"] for f in listed]
    assert set(names) == {
        "openhands",
        "swe-agent",
        "mini-swe-agent",
        "openai-chat",
        "sharegpt",
        "who-and-when",
        "atif",
        "adp",
        "nebius",
    }
    assert [f["priority"] for f in listed] == sorted(f["priority"] for f in listed)
    assert names.index("mini-swe-agent") < names.index("openai-chat")  # specific before generic
    assert names.index("nebius") < names.index("swe-agent")  # a nebius row has a 'trajectory' too


def test_convert_to_stdout_says_which_format_it_chose(real):
    proc = run("convert", str(real("swe-agent_function_calling_simple.traj")))
    (record,) = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [s["tool_call"]["name"] for s in record["steps"]] == ["find_file", "open", "edit", "bash", "submit"]
    assert "detected format swe-agent" in proc.stderr
    assert "1 trajectory, 5 steps" in proc.stderr


def test_convert_glob_with_explicit_format(real, tmp_path):
    folder = real("who-and-when").resolve()
    out = tmp_path / "ww.jsonl"
    proc = run("convert", f"{folder}/algorithm-generated_1*.json", "-f", "who-and-when", "-o", str(out))
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert len(ids) == 2  # algorithm-generated_1.json and _10.json
    assert "wrote 2 trajectories from 2 files" in proc.stderr


def test_stats_numbers(real):
    summary = json.loads(run("stats", str(real("tau-bench_gpt-4o-airline_tasks0-4.json")), "--json").stdout)
    assert summary["trajectories"] == 20
    assert summary["success"] == {"judged": 20, "succeeded": 2, "success_rate": 0.1, "mean_score": 0.1}
    assert summary["formats"] == {"openai-chat": 20}
    records = json.loads(real("tau-bench_gpt-4o-airline_tasks0-4.json").read_text())
    calls = sum(len(m.get("tool_calls") or []) for r in records for m in r["traj"])
    replies = sum(1 for r in records for m in r["traj"] if m["role"] == "assistant" and not m.get("tool_calls"))
    assert summary["steps"]["total"] == calls + replies
    assert summary["tools"]["respond"] == replies


def test_stats_text_with_tokens(real):
    text = run("stats", str(real("swe-agent_test-repo-i1.traj"))).stdout
    assert "trajectories  1  (swe-agent: 1)" in text
    assert "52861 prompt + 326 completion = 53187" in text
    assert "find_file" in text and "success       0/0 judged (n/a)" in text


def test_show_prints_steps_readably(real):
    out = run("show", str(real("openhands_basic.json")), "--max-lines", "3").stdout
    assert "[0] str_replace_editor" in out and "[1] finish" in out
    assert "outcome: not judged, exit finished" in out
    assert "more lines]" in out  # the 120-line file_text is clipped


def test_show_picks_by_id(real):
    out = run("show", str(real("tau-bench_gpt-4o-airline_tasks0-4.json")), "--id", "1-trial1").stdout
    assert out.startswith("trajectory 1-trial1")
    assert "outcome: success, score 1" in out
    missing = run("show", str(real("tau-bench_gpt-4o-airline_tasks0-4.json")), "--id", "nope", check=False)
    assert missing.returncode == 2  # an unknown id is bad input
    assert missing.stderr.startswith("error: ") and "no trajectory with id 'nope' (20 trajectories)" in missing.stderr


def test_view_writes_a_self_contained_page(real, tmp_path):
    page = tmp_path / "page.html"
    run("view", str(real("swe-agent_test-repo-i1.traj")), "-o", str(page))
    html = page.read_text()
    assert html.count('<section class="card step"') == 5
    assert '<details class="observation">' in html
    assert "http://" not in html and "https://" not in html and "<script" not in html


def test_validate_a_raw_log_and_a_bad_path(real, capsys):
    assert main(["validate", str(real("openhands_basic.json"))]) == 0
    assert "ok as openhands log, 1 trajectory, 2 steps" in capsys.readouterr().out
    assert main(["validate", "/nonexistent/file.jsonl"]) == 2
    assert capsys.readouterr().err.strip() == "error: /nonexistent/file.jsonl: no such file or directory"


def test_output_that_is_a_directory(real, tmp_path):
    proc = run("convert", str(real("openhands_basic.json")), "-o", str(tmp_path), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {tmp_path}: output is a directory; name a .jsonl file"


def test_unknown_format_name():
    proc = run("convert", "-f", "langchain", "x.json", check=False)
    assert proc.returncode == 2  # refused as an option value, before any file is read
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: Invalid value for '-f' / '--format': unknown format 'langchain'; known formats: ")
    assert "mini-swe-agent, nebius, openai-chat, openhands" in line and line.endswith(
        "(see 'knowlyr-recorder convert --help')"
    )


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        ([], "Missing command."),
        (["convert"], "Missing argument 'INPUT...'."),
        (["frobnicate"], "No such command 'frobnicate'."),
        (["show", "x.json", "--index", "-1"], "Invalid value for '--index': -1 is not in the range x>=0."),
        (["show", "x.json", "--max-lines", "0"], "Invalid value for '--max-lines': 0 is not in the range x>=1."),
    ],
)
def test_bad_usage_is_one_line_exit_2(argv, problem):
    proc = run(*argv, check=False)
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"error: {problem} (see 'knowlyr-recorder")


def test_help_and_version():
    assert "Exit status: 0 done, 1 failed while running, 2 bad input" in run("--help").stdout
    listed = run("-h").stdout
    assert all(name in listed for name in ("convert", "validate", "stats", "show", "view", "formats", "mcp"))
    assert run("--version").stdout.startswith("knowlyr-recorder, version ")
