"""``MCPClient``: a synchronous MCP client over stdio (a server it launches) or streamable HTTP.

The mcp SDK's ``ClientSession`` is asynchronous; an ``AgentEnv`` is not. Each client runs its
own event loop in a thread (an anyio blocking portal) where one task holds the transport and
the session open; ``call_tool`` runs a call there and waits for it, bounded by
``call_timeout``.

Over stdio the server is started by ``server.ServerSandbox`` (bubblewrap where it works) with
a fresh workspace (``workspace.populate``), and spoken to through ``transport.BoundedStdio``.
Over HTTP the SDK's streamable HTTP client is used with the same per-call timeout and
``max_message_bytes`` as its largest SSE event (mcp 2.x; 1.x has no such bound). Whatever
differs between the SDK's 1.x and 2.x lines is in ``sdk.py``.

``tool_record`` turns a listed tool into the plain record the env and the task generator use,
``{"name", "description", "input_schema", "read_only"}`` (``read_only`` from the tool's
``readOnlyHint`` annotation, None when the server gives none).

Whatever goes wrong with the server — it does not answer in time, exits, floods, prints
something that is not JSON-RPC, answers with a malformed result — ``call_tool`` raises
``InfrastructureError`` with one line naming the server command, the tool and what happened
(the exit code and the last line of its stderr when there are), and the client is dead: the
caller closes it and starts another. A JSON-RPC error answer to a call (an unknown tool,
parameters the server refuses) is the server's answer, returned as an error result.
``close()`` kills the server's whole process tree, and never hangs.

Examples:
    >>> import sys
    >>> config = MCPServerConfig(server=[sys.executable, "-m", "no.such.module"], sandbox="none")
    >>> with MCPClient(config) as client:
    ...     pass  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    knowlyrcore.errors.InfrastructureError: MCP server '...python... -m no.such.module' did not start: ...
"""

from __future__ import annotations

import json
import shlex
import subprocess
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.from_thread
from anyio.abc import TaskStatus
from mcp import ClientSession, types
from pydantic import ValidationError

from agentsandbox.mcp import sdk
from agentsandbox.mcp import workspace as workspaces
from agentsandbox.mcp.server import ServerSandbox, use_bwrap
from agentsandbox.mcp.transport import BoundedStdio
from knowlyrcore.errors import InfrastructureError, InputError

#: "{workspace}" in a server's arguments (and a task's state checks) is the workspace as the server sees it.
WORKSPACE_PLACEHOLDER = "{workspace}"
#: At most this many messages' worth of bytes (``max_message_bytes`` each) may come for one request.
CALL_BYTES_FACTOR = 4
_MAX_TOOL_PAGES = 100
_CLOSE_WAIT = 10.0


def one_line(text: str, chars: int = 300) -> str:
    """``text`` on one line, cut to ``chars``, lone surrogates escaped."""
    text = " ".join(str(text).split())
    if len(text) > chars:
        text = text[:chars] + "..."
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def server_argv(server: str | list[str]) -> list[str]:
    """A server command line as argv (a string is shlex-split)."""
    argv = shlex.split(server) if isinstance(server, str) else [str(a) for a in server]
    if not argv:
        raise InputError("the MCP server command is empty")
    return argv


def substitute(value: Any, workspace: str) -> Any:
    """``value`` with "{workspace}" replaced by ``workspace`` in every string inside it."""
    if isinstance(value, str):
        return value.replace(WORKSPACE_PLACEHOLDER, workspace)
    if isinstance(value, list):
        return [substitute(v, workspace) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, workspace) for k, v in value.items()}
    return value


def _decoded_size(data: str) -> int:
    """The size of base64 ``data`` once decoded, without decoding it."""
    return len(data) * 3 // 4 - data[-2:].count("=")


def _part_text(part: Any) -> str:
    """One content part of a tool result as text: text as it is, anything else in one line."""
    if isinstance(part, types.TextContent):
        return part.text
    if isinstance(part, types.ImageContent | types.AudioContent):
        return f"[{sdk.field(part, 'mime_type')}, {_decoded_size(part.data)} bytes]"
    if isinstance(part, types.EmbeddedResource):
        resource = part.resource
        if isinstance(resource, types.TextResourceContents):
            return resource.text
        return f"[{sdk.field(resource, 'mime_type') or 'binary'} resource {resource.uri}, {_decoded_size(resource.blob)} bytes]"
    if isinstance(part, types.ResourceLink):
        return f"[resource link {part.uri}]"
    return f"[{getattr(part, 'type', 'unknown')} content]"


def result_text(result: types.CallToolResult) -> str:
    """A tool result as text: its content parts joined by newlines (``_part_text``); the
    structured content as JSON when there is no content part."""
    structured = sdk.field(result, "structured_content")
    if not result.content and structured is not None:
        return json.dumps(structured, ensure_ascii=False)
    return "\n".join(_part_text(part) for part in result.content)


def tool_record(tool: types.Tool) -> dict[str, Any]:
    """An SDK ``Tool`` as ``{"name", "description", "input_schema", "read_only"}``: ``read_only`` is
    the server's ``readOnlyHint`` annotation (a bool), None when the server does not say."""
    annotations = tool.annotations
    return {
        "name": tool.name,
        "description": tool.description or "",
        "input_schema": sdk.field(tool, "input_schema"),
        "read_only": None if annotations is None else sdk.field(annotations, "read_only_hint"),
    }


def _what_failed(exc: BaseException, failure: str | None, timeout: float) -> str:
    """One phrase for what went wrong in a request to the server."""
    if failure is not None:
        return failure
    if isinstance(exc, TimeoutError):
        return f"did not answer within {timeout:g} s"
    if isinstance(exc, sdk.MCPError) and exc.error.code == types.CONNECTION_CLOSED:
        return "closed the connection"
    if isinstance(exc, ValidationError):
        return f"broke the protocol: a malformed result ({exc.error_count()} errors)"
    inner = getattr(exc, "exceptions", None)  # an exception group (the backport's on Python 3.10)
    if isinstance(inner, tuple) and inner:
        return "; ".join(_what_failed(one, None, timeout) for one in inner)
    return f"failed: {type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class MCPServerConfig:
    """Which MCP server to talk to, and the bounds it runs under (every field JSON-able, so a
    suite's ``env_kwargs`` or a command line can carry them)."""

    #: the command line of a stdio server (a string is shlex-split); "{workspace}" in it becomes
    #: the workspace as the server sees it. Exactly one of ``server`` and ``url``.
    server: str | list[str] | None = None
    #: a running streamable HTTP server instead (no process, no workspace of ours)
    url: str | None = None
    #: "auto" (bubblewrap when it works here), "bwrap" (or fail), "none" (host paths reachable!)
    sandbox: str = "auto"
    #: extra host paths the server may read
    binds: list[str] = field(default_factory=list)
    #: extra environment variables for the server; nothing else of the host's leaks in
    env: dict[str, str] = field(default_factory=dict)
    #: seconds one request may take before the server counts as hung
    call_timeout: float = 30.0
    #: seconds to start, initialize and list the tools
    startup_timeout: float = 30.0
    #: the server's memory (its cgroup, or the address space of each process)
    memory_mb: int = 1024
    #: the largest JSON-RPC message the server may send; ``CALL_BYTES_FACTOR`` times it per request
    max_message_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        if (self.server is None) == (self.url is None):
            raise InputError("give exactly one of server (a command line) and url")
        if self.server is not None:
            server_argv(self.server)
            use_bwrap(self.sandbox)

    @property
    def argv(self) -> list[str]:
        return server_argv(self.server) if self.server is not None else []

    @property
    def name(self) -> str:
        """The server as errors name it: its command line, or its URL."""
        return one_line(shlex.join(self.argv) if self.argv else str(self.url), 120)


class MCPClient:
    """A started MCP server (or a connection to one) with its tool list; see the module docstring.

    ``workspace`` (``{"copy": path}`` or ``{"git": recipe}``) fills the server's fresh
    workspace; without it the workspace is empty.
    """

    def __init__(self, config: MCPServerConfig, workspace: dict[str, Any] | None = None) -> None:
        self.config = config
        self.name = config.name
        self.tools: list[types.Tool] = []
        self.dead: str | None = None  # why the connection is unusable, once it is
        self._sandbox: ServerSandbox | None = None
        self._process: subprocess.Popen | None = None
        self._transport: BoundedStdio | None = None
        self._session: ClientSession | None = None
        self._closed = False
        self._portal_cm = anyio.from_thread.start_blocking_portal(name="knowlyr-mcp-client")
        self._portal = self._portal_cm.__enter__()
        try:
            if config.server is not None:
                self._sandbox = ServerSandbox(sandbox=config.sandbox, binds=config.binds, memory_mb=config.memory_mb)
                if workspace is not None:
                    workspaces.populate(workspace, self._sandbox.workspace)
                argv = substitute(config.argv, self._sandbox.workspace_path)
                self._process = self._sandbox.spawn(argv, config.env, stderr=subprocess.PIPE)
                self._transport = BoundedStdio(
                    self._process,
                    max_message_bytes=config.max_message_bytes,
                    max_call_bytes=CALL_BYTES_FACTOR * config.max_message_bytes,
                )
            try:
                self._portal.start_task(self._serve)
            except Exception as exc:
                what = self._failure(exc, config.startup_timeout)
                raise InfrastructureError(self._message(f"did not start: {what}")) from None
        except BaseException:
            self.close()
            raise

    @property
    def workspace_path(self) -> str | None:
        """The workspace as the server sees it (None over HTTP)."""
        return None if self._sandbox is None else self._sandbox.workspace_path

    async def _serve(self, *, task_status: TaskStatus[None]) -> None:
        async with AsyncExitStack() as stack:
            if self._transport is not None:
                read, write = await stack.enter_async_context(self._transport.open())
            else:
                assert self.config.url is not None
                read, write = await stack.enter_async_context(
                    sdk.streamable_http(
                        self.config.url,
                        timeout=self.config.call_timeout,
                        max_event_bytes=self.config.max_message_bytes,
                    )
                )
            session = await stack.enter_async_context(ClientSession(read, write))
            with anyio.fail_after(self.config.startup_timeout):
                self._begin_call()
                await session.initialize()
                self.tools = await self._list_tools(session)
            self._session = session
            task_status.started()
            await anyio.sleep_forever()  # until close() cancels it

    async def _list_tools(self, session: ClientSession) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor = None
        for _ in range(_MAX_TOOL_PAGES):
            self._begin_call()
            page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            tools += page.tools
            cursor = sdk.field(page, "next_cursor")
            if not cursor:
                break
        return tools

    def _begin_call(self) -> None:
        if self._transport is not None:
            self._transport.begin_call()

    def _failure(self, exc: BaseException, timeout: float) -> str:
        failure = self._transport.failure if self._transport is not None else None
        return _what_failed(exc, failure, timeout)

    def _message(self, what: str) -> str:
        """The one-line error about this server: ``what`` happened, with its last stderr line."""
        text = f"MCP server {self.name!r} {what}"
        tail = self._transport.stderr.last_line() if self._transport is not None else ""
        if tail:
            text += f"; last stderr line: {tail}"
        return one_line(text, 600)

    async def _call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        assert self._session is not None
        self._begin_call()
        with anyio.fail_after(self.config.call_timeout):
            return await self._session.call_tool(name, arguments)

    def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Call tool ``name``; a JSON-RPC error answer comes back as an error result. Raises
        ``InfrastructureError`` (and the client is dead) when the server fails."""
        if self.dead is not None:
            raise InfrastructureError(self.dead)
        try:
            return self._portal.call(self._call, name, arguments)
        except sdk.MCPError as exc:
            error = exc.error
            if error.code != types.CONNECTION_CLOSED and (self._transport is None or self._transport.failure is None):
                return sdk.error_result(f"{error.message} (JSON-RPC error {error.code})")
            self._die(name, exc)
        except Exception as exc:
            self._die(name, exc)
        raise AssertionError("unreachable")

    def _die(self, tool: str, exc: BaseException) -> None:
        what = self._failure(exc, self.config.call_timeout)
        self.dead = self._message(f"failed on tool {one_line(tool, 80)!r}: {what}")
        self._stop_server()
        raise InfrastructureError(self.dead) from None

    def run_command(self, argv: list[str], *, timeout: float, max_bytes: int = 1 << 16) -> tuple[int | None, str]:
        """Run ``argv`` (a task's state check) in the server's sandbox with the workspace as its
        working directory: (exit code or None on timeout, its output)."""
        if self._sandbox is None:
            raise InputError("a command check needs a server the env launched (not a url)")
        return self._sandbox.run(argv, self.config.env, timeout=timeout, max_bytes=max_bytes)

    def _stop_server(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()  # kills the server: its pipes end, so the transport's tasks end
            self._sandbox = None

    def close(self) -> None:
        """Kill the server and its process tree, stop the event loop (idempotent, never hangs)."""
        if self._closed:
            return
        self._closed = True
        self.dead = self.dead or self._message("is closed")
        self._stop_server()
        try:
            self._portal.call(self._portal.stop, True)
        except RuntimeError:  # the portal already stopped
            pass
        self._portal_cm.__exit__(None, None, None)

    def __enter__(self) -> MCPClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def list_server_tools(
    *,
    server: str | list[str] | None = None,
    url: str | None = None,
    sandbox: str = "auto",
    binds: list[str] | None = None,
    env: dict[str, str] | None = None,
    startup_timeout: float = 30.0,
    memory_mb: int = 1024,
    max_message_bytes: int = 1 << 20,
) -> list[dict[str, Any]]:
    """The tools a server offers, as ``tool_record``s (the server is started with an empty
    workspace, asked, and stopped; the options are ``MCPServerConfig``'s)."""
    config = MCPServerConfig(
        server=server,
        url=url,
        sandbox=sandbox,
        binds=list(binds or []),
        env=dict(env or {}),
        call_timeout=startup_timeout,
        startup_timeout=startup_timeout,
        memory_mb=memory_mb,
        max_message_bytes=max_message_bytes,
    )
    with MCPClient(config) as client:
        return [tool_record(tool) for tool in client.tools]
