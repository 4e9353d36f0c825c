"""The MCP server, launched as a subprocess and driven by the official MCP client over stdio."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

pytestmark = pytest.mark.integration

mcp = pytest.importorskip("mcp", reason="the 'mcp' extra is not installed")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402


def _is_error(result) -> bool:
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", False))


def _payload(result) -> dict:
    return json.loads(result.content[0].text)


async def _session_calls(calls: list[tuple[str, dict]]) -> tuple[list[str], list]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "agentrecorder.mcp_server"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = [t.name for t in (await session.list_tools()).tools]
        results = [await session.call_tool(name, arguments) for name, arguments in calls]
    return tools, results


def test_convert_validate_stats_over_stdio(real, real_logs_folder, tmp_path):
    folder = real_logs_folder
    out = tmp_path / "all.jsonl"
    (tmp_path / "bad.json").write_text('{"history": [')
    tools, (converted, strict, valid, stats, missing) = asyncio.run(
        _session_calls(
            [
                (
                    "convert",
                    {"inputs": [str(folder), str(tmp_path / "bad.json")], "output": str(out), "skip_invalid": True},
                ),
                ("convert", {"inputs": [str(tmp_path / "bad.json")], "output": str(tmp_path / "none.jsonl")}),
                ("validate", {"path": str(out)}),
                ("stats", {"path": str(real("tau-bench_gpt-4o-airline_tasks0-4.json"))}),
                ("stats", {"path": str(tmp_path / "missing.jsonl")}),
            ]
        )
    )
    assert set(tools) >= {"convert", "validate", "stats"}

    assert not _is_error(converted)
    report = _payload(converted)
    assert report["written"] == 34 and len(report["converted"]) == 15
    (failed,) = report["failed"]
    assert failed["error"].startswith(f"{tmp_path / 'bad.json'}:1: truncated JSON")
    assert len(out.read_text().splitlines()) == 34

    assert _is_error(strict)
    assert "truncated JSON" in strict.content[0].text
    assert not (tmp_path / "none.jsonl").exists()

    steps = sum(len(json.loads(line)["steps"]) for line in out.read_text().splitlines())
    assert _payload(valid) == {
        "valid": True,
        "files": [{"path": str(out), "valid": True, "kind": "trajectories", "trajectories": 34, "steps": steps}],
    }

    summary = _payload(stats)
    assert summary["trajectories"] == 20
    assert summary["success"]["succeeded"] == 2  # rewards 1.0 at records 6 and 12

    assert _is_error(missing)
    assert "no such file or directory" in missing.content[0].text
