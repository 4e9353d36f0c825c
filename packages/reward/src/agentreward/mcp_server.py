"""MCP server (stdio) exposing scoring, preference pairs and rubrics as tools for agents.

Run it with ``python -m agentreward.mcp_server`` (extra ``mcp``). Works with the mcp SDK 1.x
(``FastMCP``) and 2.x (``MCPServer``). Bad input comes back as a tool error carrying the same
one-line ``file:line: field: problem`` message as the CLI.

Paths are the client's, so every one is checked against the allowed roots (the working
directory, or each ``--root DIR``, plus the roots the client declares; ``knowlyrcore.roots``,
which is why the ``mcp`` extra brings knowlyr-core): inputs and outputs outside them are
refused, and an output never replaces a file this server did not write.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence
from typing import Any

import anyio.to_thread

try:  # mcp >= 2
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver import MCPServer as _Server
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import Context
    from mcp.server.fastmcp import FastMCP as _Server
    from mcp.server.fastmcp.exceptions import ToolError

from agentreward.engine import RewardEngine
from agentreward.errors import RewardError
from agentreward.preferences import build_preference_pairs
from agentreward.rubrics import RUBRICS, domain_weights
from agentreward.trajectories import read_trajectories, write_jsonl
from knowlyrcore.errors import KnowlyrError
from knowlyrcore.roots import AllowedRoots, parse_server_args

server = _Server("knowlyr-reward", instructions="Score agent trajectories step by step with a process reward model.")
ROOTS = AllowedRoots()  # main() replaces it by the --root directories


async def _refresh_roots(ctx: Context | None) -> None:
    """Add the roots the client declares right now (on the event loop: it asks the client)."""
    if ctx is not None:
        await ROOTS.refresh_client_roots(ctx.session)


def _paths(input: str, output: str) -> tuple[str, str]:
    """`input` and `output` resolved inside the allowed roots; `output` new or written by this server."""
    try:
        return str(ROOTS.readable(input)), str(ROOTS.writable(output))
    except KnowlyrError as exc:
        raise ToolError(str(exc)) from None


# Each tool asks the client for its roots, then does the file (and judge) work in a worker thread,
# as the SDK runs synchronous tools, so a long scoring never stalls the session.


@server.tool()
async def score(input: str, output: str, domain: str | None = None, ctx: Context | None = None) -> dict[str, Any]:
    """Score every trajectory of the JSONL file `input` into `output` (new, or a file this server
    wrote); returns each total reward."""
    await _refresh_roots(ctx)
    return await anyio.to_thread.run_sync(functools.partial(_score, input, output, domain))


def _score(input: str, output: str, domain: str | None) -> dict[str, Any]:
    source, target = _paths(input, output)
    try:
        engine = RewardEngine(domain=domain)
        scored = list(engine.score_many(read_trajectories(source)))
        write_jsonl(target, scored)
    except (RewardError, ValueError) as exc:
        raise ToolError(str(exc)) from None
    ROOTS.mark_written(target)
    return {"output": target, "scored": len(scored), "rewards": [t["reward"] for t in scored]}


@server.tool()
async def pairs(input: str, output: str, min_margin: float = 0.1, ctx: Context | None = None) -> dict[str, Any]:
    """Build DPO preference pairs from the scored trajectories in `input` into `output`."""
    await _refresh_roots(ctx)
    return await anyio.to_thread.run_sync(functools.partial(_pairs, input, output, min_margin))


def _pairs(input: str, output: str, min_margin: float) -> dict[str, Any]:
    source, target = _paths(input, output)
    try:
        built = build_preference_pairs(read_trajectories(source), min_margin=min_margin)
        write_jsonl(target, built)
    except (RewardError, ValueError) as exc:
        raise ToolError(str(exc)) from None
    ROOTS.mark_written(target)
    return {"output": target, "pairs": len(built)}


@server.tool()
def rubrics(domain: str = "generic") -> dict[str, Any]:
    """The rubrics, which layer judges each, and the domain's weights."""
    weights = domain_weights(domain)
    return {name: {"evaluator": r.evaluator, "description": r.description, "weight": weights[name]}
            for name, r in RUBRICS.items()}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m agentreward.mcp_server", description="MCP server (stdio) for knowlyr-reward"
    )
    global ROOTS
    _, ROOTS = parse_server_args(parser, argv)
    server.run()


if __name__ == "__main__":
    main()
