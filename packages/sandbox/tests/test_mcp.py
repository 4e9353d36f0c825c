"""The MCP server over stdio, driven by the official MCP client, on both backends."""

import sys

import anyio
import pytest
from sandbox_tasks import CALC_TASK

from agentsandbox.testing import require_backend

mcp = pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

pytestmark = pytest.mark.integration


def _text(result):
    assert not getattr(result, "is_error", getattr(result, "isError", False)), result
    return "".join(part.text for part in result.content)


async def _session_flow(backend):
    params = StdioServerParameters(command=sys.executable, args=["-m", "agentsandbox.mcp_server", "--backend", backend])
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
