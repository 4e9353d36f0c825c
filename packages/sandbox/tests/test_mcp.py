"""The MCP server over stdio, driven by the official MCP client, on both backends."""

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from sandbox_tasks import CALC_TASK

from agentsandbox.testing import require_backend
from knowlyrcore.origin import install_command
from knowlyrcore.testing import require_module

mcp = require_module("mcp", "the MCP server needs mcp (knowlyr-sandbox[mcp], in [dev])")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

pytestmark = pytest.mark.integration


def _text(result):
    assert not getattr(result, "is_error", getattr(result, "isError", False)), result
    return "".join(part.text for part in result.content)


def _params(backend, roots):
    roots_args = [a for root in roots for a in ("--root", str(root))]
    args = ["-m", "agentsandbox.mcp_server", "--backend", backend, *roots_args]
    return StdioServerParameters(command=sys.executable, args=args)


async def _session_flow(backend):
    params = _params(backend, [Path(CALC_TASK["repo"]).parent])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert {"reset", "bash", "read_file", "write_file", "edit_file", "grep", "submit"} <= names
        task = {k: CALC_TASK[k] for k in ("description", "repo", "setup_commands", "test_command")}
        assert "Fix add()" in _text(await session.call_tool("reset", task))
        assert _text(await session.call_tool("bash", {"command": "cd /tmp && export A=1"})) == ""
        assert _text(await session.call_tool("bash", {"command": "echo $A $PWD"})) == "1 /tmp\n"
        hostile = await session.call_tool("read_file", {"path": "../../etc/passwd"})
        assert "outside the workspace" in _text(hostile) or "climbs out" in _text(hostile)
        edited = await session.call_tool("edit_file", {"path": "calc.py", "old_str": "a - b", "new_str": "a + b"})
        assert _text(edited) == "edited calc.py at line 2"
        end = _text(await session.call_tool("submit", {}))
        assert "Tests passed" in end and '"success": true' in end


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_mcp_client_drives_an_episode(backend):
    require_backend(backend)
    anyio.run(_session_flow, backend)


async def _host_file_flow(backend, root, host):
    async with stdio_client(_params(backend, [root])) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        results = [
            await session.call_tool("reset", {"repo": str(host)}),
            await session.call_tool("reset", {"repo": "/etc"}),
            await session.call_tool("reset", {"repo": str(root / "link")}),
            await session.call_tool("reset", {"repo": str(root / ".." / host.name)}),
        ]
        after = await session.call_tool("read_file", {"path": "shadow"})
    return results, after


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_security_reset_refuses_a_host_directory_outside_the_roots(backend, tmp_path):
    """Before: reset {"repo": "/etc"} copied the host directory in, and read_file shadow returned it."""
    require_backend(backend)
    root, host = tmp_path / "root", tmp_path / "host"
    root.mkdir()
    host.mkdir()
    (host / "shadow").write_text("root:SHADOW-HASH:19000:0:99999:7:::\n")
    (root / "link").symlink_to(host, target_is_directory=True)
    results, after = anyio.run(_host_file_flow, backend, root, host)
    for result in results:
        assert getattr(result, "is_error", getattr(result, "isError", False)), result
        text = "".join(part.text for part in result.content)
        assert "outside the allowed roots" in text and "SHADOW-HASH" not in text
    assert "SHADOW-HASH" not in "".join(part.text for part in after.content)


def test_knowlyr_sandbox_mcp_starts_the_same_server_with_its_options(tmp_path):
    """`knowlyr-sandbox mcp --backend local --root DIR` is `python -m agentsandbox.mcp_server` with them."""
    require_backend("local")
    args = ["-m", "agentsandbox.cli", "mcp", "--backend", "local", "--root", str(tmp_path)]

    async def flow():
        params = StdioServerParameters(command=sys.executable, args=args)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            names = {tool.name for tool in (await session.list_tools()).tools}
            return names, await session.call_tool("reset", {"repo": "/etc"})

    names, refused = anyio.run(flow)
    assert {"reset", "bash", "submit"} <= names
    assert getattr(refused, "is_error", getattr(refused, "isError", False))
    assert "outside the allowed roots" in refused.content[0].text and str(tmp_path) in refused.content[0].text


@pytest.mark.parametrize("command", [["-m", "agentsandbox.mcp_server"], ["-m", "agentsandbox.cli", "mcp"]])
def test_without_the_sdk_every_launch_is_one_error_line(tmp_path, command):
    """`python -m agentsandbox.mcp_server` and `knowlyr-sandbox mcp` without the mcp SDK (hidden
    by a package that fails to import, as when it is not installed): one line, exit 2."""
    (tmp_path / "mcp").mkdir()
    (tmp_path / "mcp" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'mcp'\", name='mcp')\n")
    hidden = subprocess.run(
        [sys.executable, *command],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))},
    )
    assert hidden.returncode == 2, hidden.stderr
    assert (
        hidden.stderr
        == f"error: knowlyr-sandbox mcp needs the 'mcp' extra: {install_command('knowlyr-sandbox', 'mcp')}\n"
    )
