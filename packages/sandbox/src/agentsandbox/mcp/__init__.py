"""``knowlyr/mcp``: train and evaluate an agent on the tools of any MCP server.

- ``MCPEnv`` (``env.py``): the environment, registered as env id ``knowlyr/mcp``;
- ``MCPServerConfig``, ``MCPClient``, ``list_server_tools``, ``tool_record`` (``client.py``): a synchronous
  client over stdio or streamable HTTP, bounded in time and bytes, and the tools it lists as plain records;
- ``ServerSandbox``, ``WORKSPACE_MOUNT`` (``server.py``): how a server process is launched
  (bubblewrap where it works) and where it sees its workspace;
- ``populate`` (``workspace.py``): per-episode workspaces, ``{"copy": path}`` or ``{"git": recipe}``;
- ``answer_verdict``, ``state_verdict`` (``checks.py``): the task's verifiers;
- ``system_prompt_for``: a one-line-per-tool system prompt for small models.

Needs the ``mcp`` extra (the mcp SDK, 1.21 or later, 1.x or 2.x: ``sdk.py`` holds what differs).
"""

from __future__ import annotations

import importlib
from typing import Any

#: Each public name and its module. Loaded on first use (PEP 562), so that ``gitrepo`` (standard
#: library only) and the ``mcp-git`` suite's task generation import without the mcp SDK.
_HOMES = {
    "answer_verdict": "checks",
    "check_metadata": "checks",
    "state_verdict": "checks",
    "MCPClient": "client",
    "MCPServerConfig": "client",
    "list_server_tools": "client",
    "result_text": "client",
    "tool_record": "client",
    "MCPEnv": "env",
    "episode_profile": "env",
    "system_prompt_for": "env",
    "MCP_PATH_ENV": "server",
    "WORKSPACE_MOUNT": "server",
    "ServerSandbox": "server",
    "resolve_command": "server",
    "populate": "workspace",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    # the environment
    "MCPEnv",
    "episode_profile",
    "system_prompt_for",
    # talking to a server
    "MCPClient",
    "MCPServerConfig",
    "list_server_tools",
    "result_text",
    "tool_record",
    # launching one
    "MCP_PATH_ENV",
    "WORKSPACE_MOUNT",
    "ServerSandbox",
    "resolve_command",
    # workspaces and checks
    "populate",
    "answer_verdict",
    "check_metadata",
    "state_verdict",
]
