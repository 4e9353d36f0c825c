"""The MCP server, launched as a subprocess and driven by the official MCP client over stdio."""

import asyncio
import json

import pytest

from knowlyrcore import write_trajectories
from knowlyrcore.testing import check_mcp_path_refusals, mcp_is_error, mcp_session_calls, require_module

pytestmark = pytest.mark.integration
require_module("mcp", "the MCP server needs mcp (knowlyr-hub[mcp], in [dev])")


SERVER = ("-m", "trajectoryhub.mcp_server")


def payload(result):
    assert not (getattr(result, "is_error", None) or getattr(result, "isError", False)), result.content[0].text
    return json.loads(result.content[0].text)


def test_export_dedup_evaluate_compare_over_stdio(traj, tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_trajectories(
        a,
        [traj("a1", "x", reward=0.9, success=True), traj("a2", "y", reward=0.7, steps=2), traj("a3", "x", reward=0.2)],
    )
    write_trajectories(b, [traj("b1", "x", reward=0.1, agent="b"), traj("b2", "y", reward=0.3, agent="b")])
    tools, (sft, dpo, unique, report, comparison, bad) = asyncio.run(
        mcp_session_calls(
            SERVER,
            [
                ("export", {"format": "sft", "trajectories": [str(a)], "output": str(tmp_path / "sft.jsonl")}),
                ("export", {"format": "dpo", "trajectories": [str(a)], "output": str(tmp_path / "dpo.jsonl")}),
                ("deduplicate", {"trajectories": [str(a), str(a)], "output": str(tmp_path / "u.jsonl")}),
                ("evaluate", {"trajectories": str(a)}),
                ("compare", {"runs": {"a": str(a), "b": str(b)}}),
                (
                    "export",
                    {"format": "sft", "trajectories": [str(tmp_path / "missing.jsonl")], "output": str(tmp_path / "o")},
                ),
            ],
            roots=[tmp_path],
        )
    )
    assert tools >= {"export", "deduplicate", "evaluate", "compare"}
    assert payload(sft)["written"] == 1 and payload(sft)["skipped"] == {"not_successful": 2}  # SFT: successes only
    assert payload(dpo)["written"] == 1
    assert payload(unique) == {"input": 6, "unique": 2, "output": str(tmp_path / "u.jsonl")}
    assert payload(report)["episodes"] == 3
    assert payload(comparison)["leaderboard"][0]["agent"] == "a"
    assert getattr(bad, "is_error", None) or getattr(bad, "isError", False)
    assert "missing.jsonl" in bad.content[0].text


def test_security_paths_outside_the_roots_and_overwrites_are_refused(traj, tmp_path):
    """Before: export/deduplicate/evaluate/compare read any host file; export and deduplicate wrote
    (replacing) wherever `output` pointed."""
    root, outside = tmp_path / "root", tmp_path / "host"
    root.mkdir()
    outside.mkdir()
    a = root / "a.jsonl"
    write_trajectories(a, [traj("a1", "x", reward=0.9), traj("a2", "x", reward=0.2)])
    write_trajectories(outside / "host.jsonl", [traj("SHADOW-HASH", "x", reward=0.5)])
    (root / "link.jsonl").symlink_to(outside / "host.jsonl")
    (root / "notes.jsonl").write_text("precious\n")
    host, link, mine = str(outside / "host.jsonl"), str(root / "link.jsonl"), [str(a)]
    _, results = asyncio.run(
        mcp_session_calls(
            SERVER,
            [
                ("export", {"format": "sft", "trajectories": [host], "output": str(root / "o.jsonl")}),
                ("export", {"format": "sft", "trajectories": [str(outside)], "output": str(root / "o.jsonl")}),
                ("deduplicate", {"trajectories": [link], "output": str(root / "o.jsonl")}),
                ("evaluate", {"trajectories": host}),
                ("compare", {"runs": {"a": str(a), "b": str(root / ".." / "host" / "host.jsonl")}}),
                ("export", {"format": "sft", "trajectories": mine, "output": str(outside / "o.jsonl")}),
                ("deduplicate", {"trajectories": mine, "output": str(root / ".." / "host" / "o.jsonl")}),
                ("export", {"format": "dpo", "trajectories": mine, "output": str(root / "notes.jsonl")}),
                ("deduplicate", {"trajectories": mine, "output": str(root / "notes.jsonl")}),
                ("deduplicate", {"trajectories": mine, "output": str(root / "u.jsonl")}),
                ("deduplicate", {"trajectories": mine, "output": str(root / "u.jsonl")}),  # its own file: replaced
            ],
            roots=[root],
        )
    )
    *refused, first, again = results
    check_mcp_path_refusals(refused, outside=7, secret="SHADOW-HASH")
    assert not (outside / "o.jsonl").exists() and not (root / "o.jsonl").exists()
    assert (root / "notes.jsonl").read_text() == "precious\n"
    assert payload(first) == payload(again)


def test_knowlyr_hub_mcp_starts_the_same_server_with_its_roots(traj, tmp_path):
    """`knowlyr-hub mcp --root DIR` is `python -m trajectoryhub.mcp_server --root DIR`."""
    root = tmp_path / "root"
    root.mkdir()
    write_trajectories(root / "a.jsonl", [traj("a1", "x", reward=0.9)])
    write_trajectories(tmp_path / "b.jsonl", [traj("b1", "x", reward=0.1)])
    tools, (inside, outside) = asyncio.run(
        mcp_session_calls(
            ("-m", "trajectoryhub.cli", "mcp"),
            [
                ("evaluate", {"trajectories": str(root / "a.jsonl")}),
                ("evaluate", {"trajectories": str(tmp_path / "b.jsonl")}),
            ],
            roots=[root],
        )
    )
    assert tools == {"export", "deduplicate", "evaluate", "compare"}
    assert payload(inside)["episodes"] == 1
    assert mcp_is_error(outside) and "outside the allowed roots" in outside.content[0].text
