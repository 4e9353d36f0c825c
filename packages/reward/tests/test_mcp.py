"""The MCP server, launched as a subprocess and driven by the official MCP client over stdio."""

import asyncio
import json

import pytest

from knowlyrcore.testing import check_mcp_path_refusals, mcp_is_error, mcp_session_calls, require_module

pytestmark = pytest.mark.integration
require_module("mcp", "the MCP server needs mcp (knowlyr-reward[mcp], in [dev])")


SERVER = ("-m", "agentreward.mcp_server")


def test_score_pairs_rubrics_over_stdio(tmp_path):
    step = {"tool_call": {"name": "read_file", "parameters": {"path": "a.py"}}, "observation": {"output": "x"}}
    records = [
        {"id": "good", "task": {"id": "t"}, "steps": [{"index": 0, **step}], "outcome": {"success": True}},
        {
            "id": "bad",
            "task": {"id": "t"},
            "steps": [{"index": i, **step} for i in range(2)],
            "outcome": {"success": False},
        },
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "broken.jsonl").write_text('{"steps": 5}\n')
    tools, (scored, paired, rubric, broken) = asyncio.run(
        mcp_session_calls(
            SERVER,
            [
                ("score", {"input": str(src), "output": str(tmp_path / "s.jsonl"), "domain": "coding"}),
                ("pairs", {"input": str(tmp_path / "s.jsonl"), "output": str(tmp_path / "p.jsonl")}),
                ("rubrics", {"domain": "coding"}),
                ("score", {"input": str(tmp_path / "broken.jsonl"), "output": str(tmp_path / "o.jsonl")}),
            ],
            roots=[tmp_path],
        )
    )
    assert tools >= {"score", "pairs", "rubrics"}
    rewards = json.loads(scored.content[0].text)["rewards"]
    assert len(rewards) == 2 and rewards[0] > rewards[1]
    assert json.loads(paired.content[0].text)["pairs"] == 1
    assert json.loads(rubric.content[0].text)["goal_progress"]["weight"] == pytest.approx(0.3)
    assert mcp_is_error(broken) and "broken.jsonl:1: steps: must be a list" in broken.content[0].text


def test_security_paths_outside_the_roots_and_overwrites_are_refused(tmp_path):
    """Before: score/pairs read any host file and wrote (replacing) wherever `output` pointed."""
    root, outside = tmp_path / "root", tmp_path / "host"
    root.mkdir()
    outside.mkdir()
    step = {"tool_call": {"name": "bash", "parameters": {"command": "ls"}}, "observation": {"output": "x"}}
    record = {"id": "r", "task": {"id": "t"}, "steps": [step], "outcome": {"success": True}}
    (root / "in.jsonl").write_text(json.dumps(record) + "\n")
    (outside / "shadow.jsonl").write_text('{"id": "SHADOW-HASH", "steps": 5}\n')
    (root / "link.jsonl").symlink_to(outside / "shadow.jsonl")
    (root / "notes.jsonl").write_text("precious\n")
    src = str(root / "in.jsonl")
    _, results = asyncio.run(
        mcp_session_calls(
            SERVER,
            [
                ("score", {"input": str(outside / "shadow.jsonl"), "output": str(root / "a.jsonl")}),
                ("score", {"input": str(root / "link.jsonl"), "output": str(root / "a.jsonl")}),
                ("score", {"input": src, "output": str(outside / "out.jsonl")}),
                ("score", {"input": src, "output": str(root / ".." / "host" / "out.jsonl")}),
                ("score", {"input": src, "output": str(root / "notes.jsonl")}),
                ("pairs", {"input": src, "output": str(root / "notes.jsonl")}),
                ("score", {"input": src, "output": str(root / "scored.jsonl")}),
                ("score", {"input": src, "output": str(root / "scored.jsonl")}),  # its own file: replaced
            ],
            roots=[root],
        )
    )
    *refused, first, again = results
    check_mcp_path_refusals(refused, outside=4, secret="SHADOW-HASH")
    assert not (outside / "out.jsonl").exists() and not (root / "a.jsonl").exists()
    assert (root / "notes.jsonl").read_text() == "precious\n"
    assert not mcp_is_error(first) and not mcp_is_error(again), again.content[0].text


def test_knowlyr_reward_mcp_starts_the_same_server_with_its_roots(tmp_path):
    """`knowlyr-reward mcp --root DIR` is `python -m agentreward.mcp_server --root DIR`."""
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "in.jsonl").write_text('{"id": "t", "task": {"id": "t"}, "steps": []}\n')
    tools, (weights, outside) = asyncio.run(
        mcp_session_calls(
            ("-m", "agentreward.cli", "mcp"),
            [
                ("rubrics", {"domain": "coding"}),
                ("score", {"input": str(tmp_path / "in.jsonl"), "output": str(root / "s.jsonl")}),
            ],
            roots=[root],
        )
    )
    assert tools == {"score", "pairs", "rubrics"}
    assert json.loads(weights.content[0].text)["goal_progress"]["weight"] == pytest.approx(0.30)
    assert mcp_is_error(outside) and "outside the allowed roots" in outside.content[0].text
