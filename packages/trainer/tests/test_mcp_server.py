"""The trainer's MCP server, launched for real and driven by the official MCP client over stdio:
a tiny SFT run is started with ``train``, followed with ``status`` and scored with ``eval``.

    pytest packages/trainer/tests/test_mcp_server.py
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time
from pathlib import Path

import pytest

from knowlyrcore.testing import require_module

pytestmark = pytest.mark.integration

mcp = require_module("mcp", "the MCP server needs mcp (knowlyr-trainer[mcp], in [dev])")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

RUN_DEADLINE_SECONDS = 600


def _is_error(result) -> bool:
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", False))


def _payload(result) -> dict:
    assert not _is_error(result), result.content[0].text
    return json.loads(result.content[0].text)


def _server(runs_dir, roots=(), extra=(), command=("-m", "agenttrainer.mcp_server")) -> StdioServerParameters:
    env = {**os.environ, "KNOWLYR_TRAINER_RUNS": str(runs_dir)}
    args = [*command, *(a for root in roots for a in ("--root", str(root))), *extra]
    return StdioServerParameters(command=sys.executable, args=args, env=env)


async def _wait_for_end(session: ClientSession, run_id: str) -> dict:
    """Poll ``status`` until the run leaves the running state."""
    deadline = time.monotonic() + RUN_DEADLINE_SECONDS
    while True:
        status = _payload(await session.call_tool("status", {"run_id": run_id}))
        if status["state"] != "running":
            return status
        assert time.monotonic() < deadline, f"run {run_id} still running after {RUN_DEADLINE_SECONDS} s"
        await asyncio.sleep(0.2)


def test_train_status_eval_over_stdio(tmp_path, tiny_path, sft_file):
    config = tmp_path / "sft.yaml"
    config.write_text(f"model_name_or_path: {tiny_path}\ntrain_file: {sft_file}\nbatch_size: 4\nmax_length: 256\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text(f"model_name_or_path: {tiny_path}\ntrain_file: missing.jsonl\n")

    async def scenario():
        server = _server(tmp_path / "runs", roots=[tmp_path, Path(tiny_path).parent])
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name for t in (await session.list_tools()).tools}
            started = _payload(
                await session.call_tool(
                    "train", {"method": "sft", "config": str(config), "overrides": {"num_epochs": 1}}
                )
            )
            done = await _wait_for_end(session, started["run_id"])
            by_run = _payload(await session.call_tool("eval", {"run_id": started["run_id"], "eval_file": sft_file}))
            by_model = _payload(await session.call_tool("eval", {"model": tiny_path, "eval_file": sft_file}))
            failing = _payload(
                await session.call_tool("train", {"method": "sft", "config": str(broken), "cwd": str(tmp_path)})
            )
            failed = await _wait_for_end(session, failing["run_id"])
            listing = _payload(await session.call_tool("status", {}))
            errors = [
                await session.call_tool("train", {"method": "ppo", "config": str(config)}),
                await session.call_tool("train", {"method": "sft", "config": str(tmp_path / "nope.yaml")}),
                await session.call_tool("status", {"run_id": "no-such-run"}),
                await session.call_tool("eval", {"eval_file": sft_file}),
                await session.call_tool("eval", {"model": tiny_path, "eval_file": str(tmp_path / "none.jsonl")}),
            ]
            return tools, started, done, by_run, by_model, failed, listing, errors

    tools, started, done, by_run, by_model, failed, listing, errors = asyncio.run(scenario())
    assert tools == {"train", "status", "eval"}

    assert started["output_dir"] == str(tmp_path / "runs" / started["run_id"] / "output")
    assert done["state"] == "succeeded" and done["exit_code"] == 0, done.get("error_tail")
    assert done["final_model"] == started["output_dir"] + "/final"
    assert done["result"]["global_step"] == done["latest_metrics"]["step"] == 2  # 8 examples / batch 4
    assert math.isfinite(done["latest_metrics"]["loss/train"])

    trained, untrained = by_run["metrics"]["eval/loss"], by_model["metrics"]["eval/loss"]
    assert by_run["model"] == done["final_model"]
    assert math.isfinite(trained) and math.isfinite(untrained)
    assert trained != untrained  # the run really changed the weights

    assert failed["state"] == "failed" and failed["exit_code"] != 0
    assert "missing.jsonl" in failed["error_tail"]
    assert failed["final_model"] is None

    assert [r["run_id"] for r in listing["runs"]] == [failed["run_id"], started["run_id"]]  # newest first

    messages = [e.content[0].text for e in errors]
    assert all(_is_error(e) for e in errors), messages
    assert "method must be one of sft, dpo, grpo" in messages[0]
    assert "nope.yaml does not exist" in messages[1]
    assert "no run 'no-such-run'" in messages[2]
    assert "exactly one of model or run_id" in messages[3]
    assert "evaluation failed" in messages[4]


@pytest.fixture
def host(tmp_path, sft_file):
    """An allowed root holding the SFT data, and outside it a host directory with a file standing in
    for /etc/shadow."""
    root, outside = tmp_path / "root", tmp_path / "host"
    root.mkdir()
    outside.mkdir()
    (outside / "shadow").write_text("root:SHADOW-HASH:19000:0:99999:7:::\nSHADOW_USER: SHADOW-HASH\n")
    (root / "sft.jsonl").write_bytes(Path(sft_file).read_bytes())
    return root, outside


def _text(result) -> str:
    return result.content[0].text


def test_security_train_and_eval_refuse_host_files_and_never_echo_them(host, tiny_path):
    """Before: train {"config": <host file>} started a run whose status echoed the file's lines in
    error_tail, and output_dir / eval paths could point anywhere."""
    root, outside = host
    sft_file = str(root / "sft.jsonl")
    good = root / "sft.yaml"
    good.write_text(f"model_name_or_path: {tiny_path}\ntrain_file: {sft_file}\n")
    (root / "link.yaml").symlink_to(outside / "shadow")
    (root / "host-data.yaml").write_text(f"model_name_or_path: {tiny_path}\ntrain_file: {outside / 'shadow'}\n")
    (root / "host-model.yaml").write_text(f"model_name_or_path: {outside}\ntrain_file: {sft_file}\n")
    (root / "junk.yaml").write_text("SHADOW-HASH: 1\nSHADOW_USER: root\n")  # a host file copied into the root
    (root / "bad.yaml").write_text("a: 1\nsecret: [SHADOW-HASH\n")
    (root / "project").mkdir()
    (root / "project" / "notes.txt").write_text("mine")
    roots = [root, Path(tiny_path).parent]
    outside_calls = [
        ("train", {"method": "sft", "config": str(outside / "shadow")}),
        ("train", {"method": "sft", "config": str(root / "link.yaml")}),
        ("train", {"method": "sft", "config": str(root / ".." / "host" / "shadow")}),
        ("train", {"method": "sft", "config": str(root / "host-data.yaml")}),
        ("train", {"method": "sft", "config": str(root / "host-model.yaml")}),
        ("train", {"method": "sft", "config": str(good), "overrides": {"output_dir": str(outside / "out")}}),
        ("train", {"method": "sft", "config": str(good), "overrides": {"eval_file": str(outside / "shadow")}}),
        ("train", {"method": "sft", "config": str(good), "overrides": {"continual_buffer_path": str(outside / "b")}}),
        ("train", {"method": "sft", "config": "sft.yaml", "cwd": str(outside)}),
        ("eval", {"model": tiny_path, "eval_file": str(outside / "shadow")}),
        ("eval", {"model": str(outside), "eval_file": sft_file}),
    ]
    other_calls = [
        ("train", {"method": "sft", "config": str(good), "overrides": {"output_dir": str(root / "project")}}),
        ("train", {"method": "sft", "config": str(root / "junk.yaml")}),
        ("train", {"method": "sft", "config": str(root / "bad.yaml")}),
    ]

    async def scenario():
        server = _server(root / "runs", roots=roots)
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            results = [await session.call_tool(name, args) for name, args in outside_calls + other_calls]
            return results, _payload(await session.call_tool("status", {}))

    results, listing = asyncio.run(scenario())
    messages = [_text(r) for r in results]
    assert all(_is_error(r) for r in results), messages
    assert not any("SHADOW" in m and "HASH" in m for m in messages), messages
    assert all("outside the allowed roots" in m for m in messages[: len(outside_calls)]), messages
    project, junk, bad = messages[len(outside_calls) :]
    assert "already holds files the trainer did not write" in project
    assert f"{root / 'junk.yaml'}:1: 2 unknown SFTConfig field(s) ['SHADOW_USER'] and 1 key(s)" in junk
    assert f"{root / 'bad.yaml'}:" in bad and "not valid YAML" in bad
    assert listing["runs"] == []  # nothing was started
    assert not (outside / "out").exists() and (root / "project" / "notes.txt").read_text() == "mine"


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if text.encode() in handle.read():
                    found.append(pid)
        except OSError:
            continue
    return found


def test_security_train_is_a_job_with_limits(host, tiny_path):
    """Before: any number of runs at once, each running for as long as it liked."""
    root, _ = host
    sft_file = root / "sft.jsonl"
    config = root / "sft.yaml"
    config.write_text(f"model_name_or_path: {tiny_path}\ntrain_file: {sft_file}\nnum_epochs: 100000\n")
    out = root / "out"

    async def scenario():
        extra = ["--max-runs", "1", "--max-run-seconds", "3"]
        server = _server(root / "runs", roots=[root, Path(tiny_path).parent], extra=extra)
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            args = {"method": "sft", "config": str(config), "overrides": {"output_dir": str(out)}}
            first = _payload(await session.call_tool("train", args))
            second = await session.call_tool("train", args)
            ended = await _wait_for_end(session, first["run_id"])
            again = _payload(await session.call_tool("train", args))  # its own output_dir: allowed
            ended_again = await _wait_for_end(session, again["run_id"])
            return first, second, ended, ended_again

    first, second, ended, ended_again = asyncio.run(scenario())
    assert first["time_limit_seconds"] == 3 and first["output_dir"] == str(out)
    assert _is_error(second) and "at most 1 at once" in _text(second)
    for status in (ended, ended_again):
        assert status["state"] == "failed" and status["timed_out"] is True, status
        assert "wall-clock limit of 3 s" in status["error_tail"]
    exit_record = json.loads((root / "runs" / first["run_id"] / "exit.json").read_text())
    assert exit_record["timed_out"] is True and exit_record["time_limit_seconds"] == 3
    assert _processes_mentioning(str(out)) == []  # the trainer's whole process group is gone


def test_knowlyr_trainer_mcp_starts_the_same_server_with_its_options(host):
    """`knowlyr-trainer mcp --root DIR --max-runs N` is `python -m agenttrainer.mcp_server` with them."""
    root, outside = host

    async def scenario():
        server = _server(
            root / "runs", roots=[root], extra=["--max-runs", "2"], command=("-m", "agenttrainer.cli", "mcp")
        )
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name for t in (await session.list_tools()).tools}
            refused = await session.call_tool("train", {"method": "sft", "config": str(outside / "shadow")})
            return tools, refused, _payload(await session.call_tool("status", {}))

    tools, refused, listing = asyncio.run(scenario())
    assert tools == {"train", "status", "eval"}
    assert _is_error(refused) and "outside the allowed roots" in _text(refused) and str(root) in _text(refused)
    assert listing == {"runs_dir": str(root / "runs"), "runs": []}
