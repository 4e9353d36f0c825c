"""``knowlyr/mcp``: train and evaluate an agent on the tools of any MCP server.

- ``MCPEnv`` (``env.py``): the environment, registered as env id ``knowlyr/mcp``;
- ``MCPServerConfig``, ``MCPClient``, ``list_server_tools`` (``client.py``): a synchronous client over stdio or
  streamable HTTP, bounded in time and bytes;
- ``ServerSandbox``, ``WORKSPACE_MOUNT`` (``server.py``): how a server process is launched
  (bubblewrap where it works) and where it sees its workspace;
- ``populate`` (``workspace.py``): per-episode workspaces, ``{"copy": path}`` or ``{"git": recipe}``;
- ``answer_verdict``, ``state_verdict`` (``checks.py``): the task's verifiers;
- ``system_prompt_for``: a one-line-per-tool system prompt for small models.

Needs the ``mcp`` extra (the mcp SDK).
"""

from agentsandbox.mcp.checks import answer_verdict, check_metadata, state_verdict
from agentsandbox.mcp.client import MCPClient, MCPServerConfig, list_server_tools, result_text
from agentsandbox.mcp.env import MCPEnv, episode_profile, system_prompt_for
from agentsandbox.mcp.server import MCP_PATH_ENV, WORKSPACE_MOUNT, ServerSandbox, resolve_command
from agentsandbox.mcp.workspace import populate

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
