"""MCP server (stdio) exposing scoring, preference pairs and rubrics as tools for agents.

Run it with ``knowlyr-reward mcp`` or ``python -m agentreward.mcp_server`` (extra ``mcp``; the
SDK shim, error rule and launcher are ``knowlyrcore.mcp``). Bad input comes back as a tool error
carrying the same one-line ``file:line: field: problem`` message as the CLI.

Paths are the client's, so every one is checked against the allowed roots (the working
directory, or each ``--root DIR``, plus the roots the client declares; ``knowlyrcore.roots``):
inputs and outputs outside them are refused, and an output never replaces a file this server
did not write.
"""

from __future__ import annotations

# First, before the imports that need the mcp extra (the SDK, anyio):
if __name__ == "__main__":  # python -m agentreward.mcp_server: without the SDK, one error line, no traceback
    from knowlyrcore.mcp import run_as_main

    run_as_main("knowlyr-reward", "agentreward.mcp_server")

import functools
from collections.abc import Sequence
from typing import Any

import anyio.to_thread

from agentreward.engine import RewardEngine
from agentreward.errors import RewardError
from agentreward.preferences import build_preference_pairs
from agentreward.rubrics import RUBRICS, domain_weights
from agentreward.trajectories import read_trajectory_dicts
from knowlyrcore.jsonl import write_jsonl
from knowlyrcore.mcp import Context, guard, new_server, refresh_roots, run_server

server = new_server("knowlyr-reward", instructions="Score agent trajectories step by step with a process reward model.")


def _paths(input: str, output: str) -> tuple[str, str]:
    """`input` and `output` resolved inside the allowed roots; `output` new or written by this server."""
    with guard():
        return str(server.roots.readable(input)), str(server.roots.writable(output))


# Each tool asks the client for its roots, then does the file (and judge) work in a worker thread,
# as the SDK runs synchronous tools, so a long scoring never stalls the session.


@server.tool()
async def score(input: str, output: str, domain: str | None = None, ctx: Context | None = None) -> dict[str, Any]:
    """Score every trajectory of the JSONL file `input` into `output` (new, or a file this server
    wrote); returns each total reward."""
    await refresh_roots(server, ctx)
    return await anyio.to_thread.run_sync(functools.partial(_score, input, output, domain))


def _score(input: str, output: str, domain: str | None) -> dict[str, Any]:
    source, target = _paths(input, output)
    with guard(RewardError):
        engine = RewardEngine(domain=domain)
        scored = list(map(engine.score_record, read_trajectory_dicts(source)))
        write_jsonl(target, scored)
    server.roots.mark_written(target)
    return {"output": target, "scored": len(scored), "rewards": [t["reward"] for t in scored]}


@server.tool()
async def pairs(input: str, output: str, min_margin: float = 0.1, ctx: Context | None = None) -> dict[str, Any]:
    """Build DPO preference pairs from the scored trajectories in `input` into `output`."""
    await refresh_roots(server, ctx)
    return await anyio.to_thread.run_sync(functools.partial(_pairs, input, output, min_margin))


def _pairs(input: str, output: str, min_margin: float) -> dict[str, Any]:
    source, target = _paths(input, output)
    with guard(RewardError):
        built = build_preference_pairs(read_trajectory_dicts(source), min_margin=min_margin)
        write_jsonl(target, built)
    server.roots.mark_written(target)
    return {"output": target, "pairs": len(built)}


@server.tool()
def rubrics(domain: str = "generic") -> dict[str, Any]:
    """The rubrics, which layer judges each, and the domain's weights."""
    weights = domain_weights(domain)
    return {
        name: {"evaluator": r.evaluator, "description": r.description, "weight": weights[name]}
        for name, r in RUBRICS.items()
    }


def main(argv: Sequence[str] | None = None) -> int:
    return run_server(server, argv, prog="knowlyr-reward mcp")
