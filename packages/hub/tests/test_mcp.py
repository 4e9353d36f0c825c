"""The MCP server, launched as a subprocess and driven by the official MCP client over stdio."""

import asyncio
import json
import sys

import pytest

from knowlyrcore import write_trajectories

pytestmark = pytest.mark.integration
pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402


async def session_calls(calls):
    params = StdioServerParameters(command=sys.executable, args=["-m", "trajectoryhub.mcp_server"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name for t in (await session.list_tools()).tools}
        return tools, [await session.call_tool(name, args) for name, args in calls]


def payload(result):
    assert not (getattr(result, "is_error", None) or getattr(result, "isError", False)), result.content[0].text
    return json.loads(result.content[0].text)


def test_export_dedup_evaluate_compare_over_stdio(traj, tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_trajectories(
        a, [traj("a1", "x", reward=0.9), traj("a2", "y", reward=0.7, steps=2), traj("a3", "x", reward=0.2)]
    )
    write_trajectories(b, [traj("b1", "x", reward=0.1, agent="b"), traj("b2", "y", reward=0.3, agent="b")])
    tools, (sft, dpo, unique, report, comparison, bad) = asyncio.run(session_calls([
        ("export", {"format": "sft", "trajectories": [str(a)], "output": str(tmp_path / "sft.jsonl")}),
        ("export", {"format": "dpo", "trajectories": [str(a)], "output": str(tmp_path / "dpo.jsonl")}),
        ("deduplicate", {"trajectories": [str(a), str(a)], "output": str(tmp_path / "u.jsonl")}),
        ("evaluate", {"trajectories": str(a)}),
        ("compare", {"runs": {"a": str(a), "b": str(b)}}),
        ("export", {"format": "sft", "trajectories": [str(tmp_path / "missing.jsonl")], "output": str(tmp_path / "o")}),
    ]))  # fmt: skip
    assert tools >= {"export", "deduplicate", "evaluate", "compare"}
    assert payload(sft)["written"] == 3 and payload(dpo)["written"] == 1
    assert payload(unique) == {"input": 6, "unique": 2, "output": str(tmp_path / "u.jsonl")}
    assert payload(report)["episodes"] == 3
    assert payload(comparison)["leaderboard"][0]["agent"] == "a"
    assert getattr(bad, "is_error", None) or getattr(bad, "isError", False)
    assert "missing.jsonl" in bad.content[0].text
