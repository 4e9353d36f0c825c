"""The MCP server, launched as a subprocess and driven by the official MCP client over stdio."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from knowlyrcore.testing import require_module

pytestmark = pytest.mark.integration

mcp = require_module("mcp", "the MCP server needs mcp (knowlyr-recorder[mcp], in [dev])")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402


def _is_error(result) -> bool:
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", False))


def _payload(result) -> dict:
    return json.loads(result.content[0].text)


async def _session_calls(
    calls: list[tuple[str, dict]], roots: list = (), list_roots=None, command: list[str] | None = None
) -> tuple[list[str], list]:
    args = command or ["-m", "agentrecorder.mcp_server"]
    args = [*args, *(a for root in roots for a in ("--root", str(root)))]
    params = StdioServerParameters(command=sys.executable, args=args)
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, list_roots_callback=list_roots) as session,
    ):
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
            ],
            roots=[tmp_path, real("tau-bench_gpt-4o-airline_tasks0-4.json").parent],
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


@pytest.fixture
def host(tmp_path):
    """An allowed root, and outside it a host file (standing in for /etc/shadow) and host directory."""
    root, outside = tmp_path / "root", tmp_path / "host"
    root.mkdir()
    outside.mkdir()
    (outside / "shadow.jsonl").write_text('{"secret": "SHADOW-HASH"}\n')
    return root, outside


def _trajectory_line(task: str) -> str:
    from knowlyrcore import Trajectory

    record = {"task": {"id": task, "description": "d"}, "agent": "a", "steps": [], "outcome": {}}
    return Trajectory.model_validate(record).model_dump_json() + "\n"


def test_security_reads_outside_the_roots_are_refused(host):
    """Before: validate/stats/convert read any host file (stats {"path": "/"} walked the whole disk)."""
    root, outside = host
    (root / "link.jsonl").symlink_to(outside / "shadow.jsonl")
    secret = str(outside / "shadow.jsonl")
    _, results = asyncio.run(
        _session_calls(
            [
                ("validate", {"path": secret}),
                ("stats", {"path": "/"}),
                ("stats", {"path": str(root / ".." / "host")}),
                ("stats", {"path": str(root / "link.jsonl")}),
                ("stats", {"path": f"{outside}/*.jsonl"}),
                ("convert", {"inputs": [secret], "output": str(root / "out.jsonl")}),
            ],
            roots=[root],
        )
    )
    for result in results:
        assert _is_error(result), result.content[0].text
        text = result.content[0].text
        assert "outside the allowed roots" in text and str(root) in text
        assert "SHADOW-HASH" not in text
    assert not (root / "out.jsonl").exists()


def test_security_writes_outside_the_roots_and_overwrites_are_refused(host):
    """Before: convert wrote wherever `output` pointed and replaced existing files."""
    root, outside = host
    chat = {"messages": [{"role": "user", "content": "fix it"}, {"role": "assistant", "content": "done"}]}
    (root / "chat.json").write_text(json.dumps(chat))
    (root / "notes.jsonl").write_text("precious\n")
    (root / "escape.jsonl").symlink_to(outside / "new.jsonl")
    source = [str(root / "chat.json")]
    _, (outside_write, dotdot, foreign, through_link, first, again) = asyncio.run(
        _session_calls(
            [
                ("convert", {"inputs": source, "output": str(outside / "new.jsonl")}),
                ("convert", {"inputs": source, "output": str(root / ".." / "host" / "new.jsonl")}),
                ("convert", {"inputs": source, "output": str(root / "notes.jsonl")}),
                ("convert", {"inputs": source, "output": str(root / "escape.jsonl")}),
                ("convert", {"inputs": source, "output": str(root / "out.jsonl")}),
                ("convert", {"inputs": source, "output": str(root / "out.jsonl")}),  # its own file: fine
            ],
            roots=[root],
        )
    )
    assert "outside the allowed roots" in outside_write.content[0].text
    assert "outside the allowed roots" in dotdot.content[0].text
    assert "not written by this server" in foreign.content[0].text
    assert "symlink" in through_link.content[0].text
    assert all(_is_error(r) for r in (outside_write, dotdot, foreign, through_link))
    assert not (outside / "new.jsonl").exists()
    assert (root / "notes.jsonl").read_text() == "precious\n"
    assert _payload(first)["written"] == _payload(again)["written"] == 1


def test_security_roots_declared_by_the_client_are_allowed(host):
    """A client with the roots capability adds its roots; --root on `knowlyr-recorder mcp` is passed through."""
    from mcp import types

    root, outside = host
    (outside / "in.jsonl").write_text(_trajectory_line("t1"))

    async def list_roots(context):
        return types.ListRootsResult(roots=[types.Root(uri=outside.as_uri())])

    calls = [("stats", {"path": str(outside / "in.jsonl")})]
    cli = ["-m", "agentrecorder.cli", "mcp"]
    _, (declared,) = asyncio.run(_session_calls(calls, roots=[root], list_roots=list_roots, command=cli))
    _, (undeclared,) = asyncio.run(_session_calls(calls, roots=[root], command=cli))
    assert _payload(declared)["trajectories"] == 1
    assert _is_error(undeclared) and "outside the allowed roots" in undeclared.content[0].text


def test_export_over_stdio(real, tmp_path):
    rows = real("interop/nebius_swe-agent-trajectories_5rows.json")
    out = tmp_path / "rows.atif.jsonl"
    out.write_text("not ours\n")
    tools, (refused, exported, bad) = asyncio.run(
        _session_calls(
            [
                ("export", {"inputs": [str(rows)], "output": str(out), "to": "atif"}),
                ("export", {"inputs": [str(rows)], "output": str(tmp_path / "rows.adp.json"), "to": "adp"}),
                ("export", {"inputs": [str(rows)], "output": str(tmp_path / "x.json"), "to": "sql"}),
            ],
            roots=[tmp_path, rows.parent],
        )
    )
    assert "export" in tools
    assert _is_error(refused) and out.read_text() == "not ours\n"  # a file the server did not write
    assert _payload(exported) == {"output": str(tmp_path / "rows.adp.json"), "to": "adp", "written": 5}
    documents = json.loads((tmp_path / "rows.adp.json").read_text())
    assert [d["id"] for d in documents][:2] == ["tomerfiliba__plumbum-366_17", "tempoCollaboration__OQuPy-74_55"]
    assert _is_error(bad) and "unknown target 'sql'" in bad.content[0].text
    assert not (tmp_path / "x.json").exists()
