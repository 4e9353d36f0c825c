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

import pytest

pytestmark = pytest.mark.integration

mcp = pytest.importorskip("mcp", reason="the 'mcp' extra is not installed")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

RUN_DEADLINE_SECONDS = 600


def _is_error(result) -> bool:
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", False))


def _payload(result) -> dict:
    assert not _is_error(result), result.content[0].text
    return json.loads(result.content[0].text)


def _server(runs_dir) -> StdioServerParameters:
    env = {**os.environ, "KNOWLYR_TRAINER_RUNS": str(runs_dir)}
    return StdioServerParameters(command=sys.executable, args=["-m", "agenttrainer.mcp_server"], env=env)


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
        async with stdio_client(_server(tmp_path / "runs")) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name for t in (await session.list_tools()).tools}
            started = _payload(await session.call_tool("train", {"method": "sft", "config": str(config),
                                                                 "overrides": {"num_epochs": 1}}))  # fmt: skip
            done = await _wait_for_end(session, started["run_id"])
            by_run = _payload(await session.call_tool("eval", {"run_id": started["run_id"], "eval_file": sft_file}))
            by_model = _payload(await session.call_tool("eval", {"model": tiny_path, "eval_file": sft_file}))
            failing = _payload(await session.call_tool("train", {"method": "sft", "config": str(broken),
                                                                 "cwd": str(tmp_path)}))  # fmt: skip
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
