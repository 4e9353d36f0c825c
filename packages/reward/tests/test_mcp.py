"""The MCP server, launched as a subprocess and driven by the official MCP client over stdio."""

import asyncio
import json
import sys

import pytest

pytestmark = pytest.mark.integration
pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402


async def session_calls(calls):
    params = StdioServerParameters(command=sys.executable, args=["-m", "agentreward.mcp_server"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name for t in (await session.list_tools()).tools}
        return tools, [await session.call_tool(name, args) for name, args in calls]


def is_error(result):
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", False))


def test_score_pairs_rubrics_over_stdio(tmp_path):
    step = {"tool_call": {"name": "read_file", "parameters": {"path": "a.py"}}, "observation": {"output": "x"}}
    records = [
        {"id": "good", "task": {"id": "t"}, "steps": [step], "outcome": {"success": True}},
        {"id": "bad", "task": {"id": "t"}, "steps": [step, step], "outcome": {"success": False}},
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "broken.jsonl").write_text('{"steps": 5}\n')
    tools, (scored, paired, rubric, broken) = asyncio.run(session_calls([
        ("score", {"input": str(src), "output": str(tmp_path / "s.jsonl"), "domain": "coding"}),
        ("pairs", {"input": str(tmp_path / "s.jsonl"), "output": str(tmp_path / "p.jsonl")}),
        ("rubrics", {"domain": "coding"}),
        ("score", {"input": str(tmp_path / "broken.jsonl"), "output": str(tmp_path / "o.jsonl")}),
    ]))  # fmt: skip
    assert tools >= {"score", "pairs", "rubrics"}
    rewards = json.loads(scored.content[0].text)["rewards"]
    assert len(rewards) == 2 and rewards[0] > rewards[1]
    assert json.loads(paired.content[0].text)["pairs"] == 1
    assert json.loads(rubric.content[0].text)["goal_progress"]["weight"] == pytest.approx(0.3)
    assert is_error(broken) and "broken.jsonl:1: steps: must be a list" in broken.content[0].text
