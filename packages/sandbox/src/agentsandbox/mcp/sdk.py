"""The mcp SDK as ``agentsandbox.mcp`` uses it, on 1.x (>= 1.21) and 2.x alike: every difference is here.

The ``mcp`` extra accepts both lines (``mcp>=1.21``; CI runs the MCP tests once on the newest
1.x), and they differ where this client touches them:

- the error a session raises for a JSON-RPC error answer is ``McpError`` in 1.x, ``MCPError`` in
  2.x; both carry ``.error``, the ``ErrorData`` (``code``, ``message``);
- the protocol models' attributes are the wire's camelCase in 1.x (``inputSchema``, ``isError``,
  ``mimeType``, ``readOnlyHint``) and snake_case in 2.x: ``field(obj, "is_error")`` reads either,
  always named the 2.x way. A model is built with the wire names (``error_result``), which 2.x
  accepts too;
- one line of stdio is parsed into the ``JSONRPCMessage`` root model in 1.x, through a type
  adapter into the bare union in 2.x (``session_message``);
- the streamable HTTP client takes an ``httpx2`` client in 2.x and caps an SSE event at
  ``max_event_bytes``; 1.x takes ``httpx``, has no such cap, and yields a third item (the
  session id's getter); releases before 1.2x have only the older ``streamablehttp_client``
  (``streamable_http``).

The server side of the SDK (``MCPServer`` / ``FastMCP``) is bridged by ``knowlyrcore.mcp``.

Examples:
    >>> from mcp import types
    >>> field(types.CallToolResult(content=[], isError=True), "is_error")
    True
    >>> field(error_result("no such file"), "is_error")
    True
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from knowlyrcore.errors import require_extra

# without the SDK: one line naming the extra, wherever agentsandbox.mcp is first used
require_extra("mcp", "knowlyr-sandbox", "mcp", "knowlyr/mcp (an environment over an MCP server)")

from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream  # noqa: E402
from mcp import types  # noqa: E402
from mcp.shared.message import SessionMessage  # noqa: E402

SDK_VERSION = importlib.metadata.version("mcp")
#: mcp 2.x (snake_case models, ``MCPError``, ``httpx2``) rather than 1.x
SDK_2 = int(SDK_VERSION.split(".")[0]) >= 2

if SDK_2:
    from mcp.shared.exceptions import MCPError
else:
    from mcp.shared.exceptions import McpError as MCPError

__all__ = ["SDK_2", "SDK_VERSION", "MCPError", "error_result", "field", "session_message", "streamable_http"]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def field(obj: Any, name: str) -> Any:
    """``obj``'s field ``name``, given in snake_case (2.x's spelling), read as the installed SDK spells it."""
    return getattr(obj, name if SDK_2 else _camel(name))


def error_result(text: str) -> types.CallToolResult:
    """A tool result that is an error saying ``text`` (how a JSON-RPC error answer is returned)."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], isError=True)


def session_message(line: bytes) -> SessionMessage:
    """One line a server wrote, as the message a session reads; ``ValueError`` when it is not JSON-RPC."""
    if SDK_2:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    return SessionMessage(types.JSONRPCMessage.model_validate_json(line, by_name=False))


@asynccontextmanager
async def streamable_http(
    url: str, *, timeout: float, max_event_bytes: int
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """The (read, write) streams of a ``ClientSession`` on the streamable HTTP server at ``url``:
    ``timeout`` seconds for any HTTP operation, an SSE event over ``max_event_bytes`` an error
    (2.x only: 1.x does not bound it)."""
    from mcp.client import streamable_http as client
    from mcp.shared._httpx_utils import create_mcp_http_client

    if not hasattr(client, "streamable_http_client"):  # mcp 1.21 ...: the older client only
        async with client.streamablehttp_client(url, timeout=timeout, sse_read_timeout=timeout) as (read, write, _):
            yield read, write
        return
    httpx = importlib.import_module("httpx2" if SDK_2 else "httpx")
    async with create_mcp_http_client(timeout=httpx.Timeout(timeout)) as http:
        if SDK_2:
            opened = client.streamable_http_client(url, http_client=http, max_sse_event_size=max_event_bytes)
            async with opened as (read, write):
                yield read, write
        else:
            async with client.streamable_http_client(url, http_client=http) as (read, write, _):
                yield read, write
