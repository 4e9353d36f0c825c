"""An MCP server (stdio) exposing a sandbox's coding tools to any MCP client.

``knowlyr-sandbox mcp`` (or ``knowlyr-sandbox-mcp``, or ``python -m agentsandbox.mcp_server --backend
local``) serves one
``SandboxEnv``: ``reset`` starts a task (repository, setup and test commands), then ``bash``,
``read_file``, ``write_file``, ``edit_file``, ``grep``, ``list_files``, ``git``, ``run_tests`` act
in it and ``submit`` ends the episode with the test outcome and the patch. Each tool returns
the observation text an agent would see. Needs the ``mcp`` extra (the SDK shim, error rule and
launcher are ``knowlyrcore.mcp``).

The tools are ``async`` but do their (short) work inline on the event loop's thread: a stdio
server has one client, and forking every sandbox process from that one thread keeps
bubblewrap's parent-death signal tied to the server's lifetime.

``reset`` copies a host directory or archive into the workspace, so its ``repo`` is checked
against the allowed roots (the working directory, or each ``--root DIR``, plus the roots the
client declares; ``knowlyrcore.roots``): ``reset {"repo": "/etc"}`` is refused before anything
is copied. Git URLs are fetched as before.
"""

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from agentsandbox.config import SandboxConfig
from agentsandbox.env import SandboxEnv
from knowlyrcore.mcp import guard, new_server, refresh_roots, run_server
from knowlyrcore.roots import AllowedRoots


def _is_url(repo: str) -> bool:
    return "://" in repo or repo.startswith("git@")


def build_server(backend: str = "auto", config: SandboxConfig | None = None, roots: AllowedRoots | None = None):
    """The MCP server object, with its tools bound to one lazily started ``server.sandbox_env``.

    ``roots`` bounds the host directories ``reset`` may copy in (default: the working directory).
    """
    # This module has no `from __future__ import annotations`: the tools' `Context` annotation is
    # evaluated when the tools are defined, so it is imported (the SDK's, from the extra) here.
    from knowlyrcore.mcp import Context

    server = new_server("knowlyr-sandbox", instructions="Code-execution sandbox: reset a task, then act in it.")
    if roots is not None:
        server.roots = roots
    server.sandbox_env = SandboxEnv(backend, config)
    state: dict[str, Any] = {"started": False}

    def act(tool: str, params: dict[str, Any]) -> str:
        env = server.sandbox_env
        if not state["started"]:
            env.reset(task="interactive session")
            state["started"] = True
        ts = env.step({"tool": tool, "params": {k: v for k, v in params.items() if v is not None}})
        if ts.done:
            state["started"] = False
            summary = {k: ts.info.get(k) for k in ("success", "score", "tests", "patch") if k in ts.info}
            return f"{ts.observation}\n{json.dumps(summary, ensure_ascii=False)}"
        return ts.observation

    @server.tool()
    async def reset(
        description: str = "",
        repo: str | None = None,
        setup_commands: list[str] | None = None,
        test_command: str | None = None,
        ctx: Context | None = None,
    ) -> str:
        """Start a task: copy `repo` (host directory or archive inside the allowed roots, or a git URL)
        into the workspace, run the setup commands."""
        if repo is not None and not _is_url(repo):
            roots = await refresh_roots(server, ctx)
            with guard():
                repo = str(roots.readable(repo))
        task = {
            "description": description,
            "repo": repo,
            "setup_commands": setup_commands or [],
            "test_command": test_command,
        }
        ts = server.sandbox_env.reset(task=task)
        state["started"] = True
        return ts.observation

    @server.tool()
    async def bash(command: str, timeout: float | None = None) -> str:
        """Run a command in the persistent shell (cwd and variables carry over)."""
        return act("bash", {"command": command, "timeout": timeout})

    @server.tool()
    async def read_file(path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        """Read a workspace file, optionally lines start_line..end_line."""
        return act("read_file", {"path": path, "start_line": start_line, "end_line": end_line})

    @server.tool()
    async def write_file(path: str, content: str) -> str:
        """Create or overwrite a workspace file."""
        return act("write_file", {"path": path, "content": content})

    @server.tool()
    async def edit_file(path: str, old_str: str, new_str: str) -> str:
        """Replace the single exact occurrence of old_str in a file by new_str."""
        return act("edit_file", {"path": path, "old_str": old_str, "new_str": new_str})

    @server.tool()
    async def grep(pattern: str, path: str | None = None, include: str | None = None) -> str:
        """Search workspace files for a regular expression."""
        return act("grep", {"pattern": pattern, "path": path, "include": include})

    @server.tool()
    async def list_files(path: str | None = None, pattern: str | None = None) -> str:
        """List workspace files, optionally filtered by a glob."""
        return act("list_files", {"path": path, "pattern": pattern})

    @server.tool()
    async def git(subcommand: str, path: str | None = None) -> str:
        """git status, diff or log of the workspace."""
        return act("git", {"subcommand": subcommand, "path": path})

    @server.tool()
    async def run_tests(path: str | None = None) -> str:
        """Run the task's test command."""
        return act("run_tests", {"path": path})

    @server.tool()
    async def submit(summary: str | None = None) -> str:
        """End the episode; returns the test outcome and the patch."""
        return act("submit", {"summary": summary})

    return server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="knowlyr-sandbox mcp", description="MCP server (stdio) for knowlyr-sandbox")
    parser.add_argument("--backend", default="auto", choices=["auto", "docker", "local"])
    parser.add_argument("--timeout", type=float, default=60.0, help="per-command timeout in seconds")
    server = build_server()

    def configure(args: argparse.Namespace) -> None:
        server.sandbox_env = SandboxEnv(args.backend, SandboxConfig(timeout=args.timeout))

    try:
        return run_server(server, argv, prog=parser.prog, parser=parser, configure=configure)
    finally:
        server.sandbox_env.close()


def script() -> None:
    """``knowlyr-sandbox-mcp`` and ``python -m agentsandbox.mcp_server``: ``main``, or one
    ``error:`` line naming the extra without the SDK."""
    from knowlyrcore.mcp import run_module

    sys.exit(run_module("knowlyr-sandbox", "agentsandbox.mcp_server", sys.argv[1:]))


if __name__ == "__main__":
    script()
