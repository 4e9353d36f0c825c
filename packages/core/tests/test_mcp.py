"""knowlyr-core's MCP server, launched as a subprocess and driven by the official MCP client over stdio."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from knowlyrcore import Trajectory
from knowlyrcore.builtin_domains import BUILTIN_DOMAINS
from knowlyrcore.origin import install_command
from knowlyrcore.testing import require_module

pytestmark = pytest.mark.integration

mcp = require_module("mcp", "the MCP server needs mcp (knowlyr-core[mcp], in [dev])")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

SERVER = ["-m", "knowlyrcore.mcp_server"]
CLI = ["-m", "knowlyrcore.cli", "mcp"]


def _is_error(result) -> bool:
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", False))


def _payload(result) -> dict:
    assert not _is_error(result), result.content[0].text
    return json.loads(result.content[0].text)


async def _session_calls(calls, roots=(), command=SERVER):
    args = [*command, *(a for root in roots for a in ("--root", str(root)))]
    params = StdioServerParameters(command=sys.executable, args=args)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name for t in (await session.list_tools()).tools}
        return tools, [await session.call_tool(name, arguments) for name, arguments in calls]


def _trajectory_line(task: str) -> str:
    record = {"task": {"id": task, "description": "d"}, "agent": "a", "steps": [], "outcome": {}}
    return Trajectory.model_validate(record).model_dump_json() + "\n"


def test_validate_domains_domain_tool_schemas_over_stdio(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text(_trajectory_line("t1") + _trajectory_line("t2"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(_trajectory_line("t1") + '{"task": {"id": "t2"}, "agent": "a", "steps": 3}\n')
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "x", "description": "fix it"}\n')
    cli = subprocess.run(
        [sys.executable, "-m", "knowlyrcore.cli", "validate", str(bad)], capture_output=True, text=True
    )
    tools, (valid, invalid, task, task_as_trajectory, listing, coding, schemas, unknown) = asyncio.run(
        _session_calls(
            [
                ("validate", {"path": str(good)}),
                ("validate", {"path": str(bad)}),
                ("validate", {"path": str(tasks), "kind": "task"}),
                ("validate", {"path": str(tasks)}),
                ("domains", {}),
                ("domain", {"name": "coding"}),
                ("tool_schemas", {"names": ["bash", "nope"], "domain": "coding"}),
                ("domain", {"name": "no-such-domain"}),
            ],
            roots=[tmp_path],
            command=CLI,  # `knowlyr-core mcp --root DIR` starts the same server
        )
    )
    assert tools == {"validate", "domains", "domain", "tool_schemas", "search_tools"}
    assert _payload(valid) == {"path": str(good), "kind": "trajectory", "valid": True, "records": 2}

    report = _payload(invalid)
    assert report["valid"] is False and report["error"].startswith(f"{bad}:2: ")
    assert cli.returncode == 2 and cli.stderr.strip() == f"error: {report['error']}"  # the CLI's very line

    assert _payload(task)["records"] == 1
    assert _payload(task_as_trajectory)["valid"] is False

    names = [d["name"] for d in _payload(listing)["domains"]]
    assert set(BUILTIN_DOMAINS) <= set(names) and names == sorted(names)
    profile = _payload(coding)
    assert profile["rubric_weights"] == BUILTIN_DOMAINS["coding"].rubric_weights
    assert "bash" in [t["name"] for t in profile["tools"]]

    bash, nope = _payload(schemas)["tools"]
    assert bash["function"]["parameters"]["required"] == ["command"]
    assert nope["function"] == {"name": "nope", "description": "", "parameters": {"type": "object", "properties": {}}}
    assert _is_error(unknown) and "unknown domain 'no-such-domain'" in unknown.content[0].text


def test_security_a_path_outside_the_roots_is_refused(tmp_path):
    """validate reads only inside the roots: a host file, `..` and a symlink out are refused unread."""
    root, outside = tmp_path / "root", tmp_path / "host"
    root.mkdir()
    outside.mkdir()
    (outside / "shadow.jsonl").write_text('{"secret": "SHADOW-HASH"}\n')
    (root / "link.jsonl").symlink_to(outside / "shadow.jsonl")
    _, results = asyncio.run(
        _session_calls(
            [
                ("validate", {"path": str(outside / "shadow.jsonl")}),
                ("validate", {"path": str(root / ".." / "host" / "shadow.jsonl")}),
                ("validate", {"path": str(root / "link.jsonl")}),
                ("validate", {"path": "/etc/passwd"}),
            ],
            roots=[root],
        )
    )
    for result in results:
        text = result.content[0].text
        assert _is_error(result), text
        assert "outside the allowed roots" in text and str(root) in text
        assert "SHADOW-HASH" not in text


def test_mcp_without_the_sdk_names_the_extra(tmp_path):
    """`knowlyr-core mcp` without the mcp SDK: one line naming the extra, exit 2, no traceback."""
    (tmp_path / "mcp").mkdir()
    (tmp_path / "mcp" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'mcp'\", name='mcp')\n")
    hidden = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); from knowlyrcore.cli import main; "
            "sys.exit(main(['mcp', '--root', sys.argv[1]]))",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert hidden.returncode == 2, hidden.stderr
    assert hidden.stderr == f"error: knowlyr-core mcp needs the 'mcp' extra: {install_command('knowlyr-core', 'mcp')}\n"


def test_search_tools_over_stdio_inside_the_roots_only(tmp_path):
    library = tmp_path / "tools.json"
    library.write_text(
        json.dumps(
            [
                {
                    "type": "function",
                    "function": {
                        "name": "refund_payment",
                        "description": "Refund a card payment",
                        "parameters": {"type": "object"},
                    },
                },
                {"name": "get_forecast", "description": "Weather forecast for a city"},
            ]
        )
    )
    outside = tmp_path.parent / f"{tmp_path.name}-outside.json"
    outside.write_text(library.read_text())
    _, (generated, own, refused, bad_k) = asyncio.run(
        _session_calls(
            [
                ("search_tools", {"query": "please cancel my shop order", "k": 2}),
                ("search_tools", {"query": "refund my card payment", "library": str(library), "k": 1}),
                ("search_tools", {"query": "refund", "library": str(outside)}),
                ("search_tools", {"query": "refund", "k": 500}),
            ],
            roots=[tmp_path],
        )
    )
    assert _payload(generated)["tools"][0]["name"] == "shop_cancel_order"
    assert [t["name"] for t in _payload(own)["tools"]] == ["refund_payment"]
    assert _is_error(refused) and "outside" in refused.content[0].text.lower()
    assert _is_error(bad_k) and "k must be" in bad_k.content[0].text
    outside.unlink()
