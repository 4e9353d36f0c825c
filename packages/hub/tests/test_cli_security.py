"""Issue #11, findings 10 and 11, through the real ``knowlyr-hub`` command (a subprocess).

Before the fix ``pipeline`` rejected a knowlyr trajectory file as "unknown log format",
exited 0 with empty datasets for every bad input, dropped a whole file for one bad line,
and wrote straight into the output folder (a killed run left hidden ``.tmp`` files and a
rerun mixed with the old outputs); ``export`` / ``dedup`` / ``evaluate`` / ``compare`` exited
0 on an empty file and gave a ``RecursionError`` traceback on deeply nested JSON.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from knowlyrcore.testing import real_data

LOGS = ["swe-agent_test-repo-i1.traj", "openhands_basic.json", "mini-swe-agent_local.traj.json"]


def hub(*args, timeout=300):
    done = subprocess.run(
        [sys.executable, "-m", "trajectoryhub.cli", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.fixture
def stages():
    """The pipeline's convert and score stages are optional siblings (knowlyr-hub[recorder,reward]),
    absent when the hub is tested alone."""
    pytest.importorskip("agentrecorder", reason="the pipeline needs knowlyr-recorder (knowlyr-hub[recorder])")
    pytest.importorskip("agentreward", reason="the pipeline needs knowlyr-reward (knowlyr-hub[reward])")


@pytest.fixture
def trajectories(tmp_path, stages) -> Path:
    """Real agent logs converted by knowlyr-recorder: a knowlyr trajectory JSONL file."""
    from agentrecorder.convert import convert_file

    path = tmp_path / "trajectories.jsonl"
    path.write_text("".join(t.model_dump_json() + "\n" for name in LOGS for t in convert_file(real_data(name))))
    return path


def test_security_pipeline_accepts_a_trajectory_file(tmp_path, trajectories):
    # the three logs record no verdict: SFT takes them only with --include-failures
    done = hub("pipeline", trajectories, "-o", tmp_path / "out", "--include-failures")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["converted"]["formats"] == ["knowlyr"] and report["trajectories"] == 3 and not report["errors"]
    latest = tmp_path / "out" / "latest"
    assert latest.resolve() == Path(report["run_dir"]).resolve()
    sft = (latest / "sft.jsonl").read_text().splitlines()
    assert len(sft) == 3 and len((latest / "scored.jsonl").read_text().splitlines()) == 3
    manifest = json.loads((latest / "manifest.json").read_text())
    assert manifest["exports"]["sft"] == {"path": "sft.jsonl", "written": 3, "skipped": {}}


@pytest.mark.parametrize("content", ["", "garbage\n", '{"neither": "a log nor a trajectory"}\n', "[" * 10_000])
@pytest.mark.parametrize("skip_invalid", [False, True])
def test_security_pipeline_with_nothing_usable_exits_1(tmp_path, content, skip_invalid, stages):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    done = hub("pipeline", bad, "-o", tmp_path / "out", *(["--skip-invalid"] if skip_invalid else []))
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert str(bad) in done.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("run-*"))


def test_security_pipeline_skip_invalid_keeps_good_records(tmp_path, trajectories):
    good = trajectories.read_text().splitlines()
    nan = json.loads(good[1])
    nan["metadata"]["loss"] = "@"
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join([good[0], '{"broken', json.dumps(nan).replace('"@"', "NaN"), good[2]]) + "\n")
    strict = hub("pipeline", mixed, "-o", tmp_path / "strict")
    assert strict.returncode == 2
    (message,) = strict.stderr.strip().splitlines()
    assert message.startswith(f"error: {mixed}:2: invalid JSON: ") and not (tmp_path / "strict").exists()
    done = hub("pipeline", mixed, "-o", tmp_path / "out", "--skip-invalid")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["trajectories"] == 2
    assert report["exports"]["sft"]["written"] == 0  # by default SFT leaves out runs nobody judged a success
    assert report["exports"]["sft"]["skipped"] == {"not_successful": 2}
    assert [e.split(": ")[0] for e in report["errors"]] == [f"{mixed}:2", f"{mixed}:3"]
    assert "metadata.loss: non-finite number (NaN)" in report["errors"][1]
    assert f"skipped {mixed}:2: invalid JSON" in done.stderr and f"skipped {mixed}:3: metadata.loss" in done.stderr


def test_security_pipeline_skip_invalid_per_record_in_a_jsonl_log(tmp_path, stages):
    """A framework log in JSONL (OpenAI chats, one per line): a bad line costs only that line."""
    chat = {
        "messages": [
            {"role": "user", "content": "list files"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        ]
    }
    other = json.loads(json.dumps(chat).replace("list files", "list all files"))
    log = tmp_path / "chats.jsonl"
    log.write_text("\n".join([json.dumps(chat), "{not json", json.dumps(other)]) + "\n")
    done = hub("pipeline", log, "-o", tmp_path / "out", "--skip-invalid")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["trajectories"] == 2 and [e.split(": ")[0] for e in report["errors"]] == [f"{log}:2"]


def test_security_pipeline_rerun_cleans_what_a_killed_run_left(tmp_path, trajectories):
    out = tmp_path / "out"
    first = hub("pipeline", trajectories, "-o", out)
    assert first.returncode == 0, first.stderr
    first_run = Path(json.loads(first.stdout)["run_dir"])
    # what kill -9 leaves: a partial run directory, and (older versions) hidden temp files beside the outputs
    partial = out / ".run-20000101T000000Z-dead00.partial"
    partial.mkdir()
    (partial / "trajectories.jsonl").write_text("{}\n")
    (partial / ".sft.jsonl.abc123.tmp").write_text('{"half')
    (out / ".sft.jsonl.xyz789.tmp").write_text('{"half')
    (out / "notes.txt").write_text("mine")  # not the pipeline's: kept
    second = hub("pipeline", trajectories, "-o", out)
    assert second.returncode == 0, second.stderr
    second_run = Path(json.loads(second.stdout)["run_dir"])
    assert second_run != first_run and (out / "latest").resolve() == second_run.resolve()
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([".pipeline.lock", "latest", "notes.txt", first_run.name, second_run.name])
    for run in (first_run, second_run):  # each run complete and on its own
        manifest = json.loads((run / "manifest.json").read_text())
        assert sorted(p.name for p in run.iterdir()) == sorted(
            ["trajectories.jsonl", "scored.jsonl", "manifest.json", *(v["path"] for v in manifest["exports"].values())]
        )


def test_security_pipeline_killed_mid_run_leaves_no_mix(tmp_path, trajectories):
    """A real ``kill -9`` at some point of a run: a rerun finds no partial or temp file left."""
    lines = trajectories.read_text().splitlines()
    big = tmp_path / "big.jsonl"
    big.write_text(
        "".join(
            json.dumps({**json.loads(lines[i % 3]), "id": f"t{i}"}).replace(
                '"description": "', f'"description": "#{i} ', 1
            )
            + "\n"
            for i in range(600)
        )
    )
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trajectoryhub.cli", "pipeline", str(big), "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(out.glob(".run-*.partial/scored.jsonl")) and proc.poll() is None:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    small = tmp_path / "small.jsonl"
    small.write_text("\n".join(lines[:1]) + "\n")
    done = hub("pipeline", small, "-o", out)
    assert done.returncode == 0, done.stderr
    left = [p.name for p in out.rglob("*") if p.name.endswith((".tmp", ".partial"))]
    assert left == []
    latest = out / "latest"
    assert len((latest / "trajectories.jsonl").read_text().splitlines()) == 1  # only the rerun's data


@pytest.mark.parametrize(
    "command",
    [
        ["export", "--format", "sft", "-t", "{f}", "-o", "{o}"],
        ["dedup", "-t", "{f}", "-o", "{o}"],
        ["evaluate", "-t", "{f}"],
        ["compare", "-t", "{f}", "-t", "{f}"],
    ],
)
@pytest.mark.parametrize(
    ("content", "problem"),
    [("", "no trajectories (empty file)"), ("[" * 100_000 + "]" * 100_000, "nested deeper than 100 levels")],
)
def test_security_hub_commands_refuse_empty_and_deep_inputs(tmp_path, command, content, problem):
    path = tmp_path / "in.jsonl"
    path.write_text(content + "\n")
    output = tmp_path / "out.jsonl"
    output.write_text("old\n")
    done = hub(*[a.format(f=path, o=output) for a in command])
    assert done.returncode == 2
    where = f"{path}:1" if content else str(path)
    assert done.stderr.strip().splitlines() == [f"error: {where}: {problem}"]
    assert output.read_text() == "old\n"
