"""MCP server (stdio) exposing dataset export, deduplication and agent comparison as tools.

Run it with ``python -m trajectoryhub.mcp_server`` (extra ``mcp``). Works with the mcp SDK
1.x (``FastMCP``) and 2.x (``MCPServer``). Bad input comes back as a tool error carrying the
same one-line ``file:line: field: problem`` message as the CLI.

Paths are the client's, so every one is checked against the allowed roots (the working
directory, or each ``--root DIR``, plus the roots the client declares; ``knowlyrcore.roots``):
inputs and outputs outside them are refused, directories are walked only inside them and only
so far, and an output never replaces a file this server did not write.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence
from pathlib import Path
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

from knowlyrcore import KnowlyrError, read_trajectories, write_trajectories
from knowlyrcore.roots import AllowedRoots, parse_server_args
from trajectoryhub.dedup import dedup
from trajectoryhub.evaluate import compare_agents, evaluate_agent
from trajectoryhub.export import DatasetExporter

server = _Server("knowlyr-hub", instructions="Export agent trajectories as SFT/DPO/GRPO datasets and compare agents.")
ROOTS = AllowedRoots()  # main() replaces it by the --root directories


def _guard(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (KnowlyrError, ValueError) as exc:
        raise ToolError(str(exc)) from None


async def _refresh_roots(ctx: Context | None) -> None:
    """Add the roots the client declares right now (on the event loop: it asks the client)."""
    if ctx is not None:
        await ROOTS.refresh_client_roots(ctx.session)


def _inputs(paths: list[str]) -> list[Path]:
    """The trajectory files `paths` name (a directory: its .jsonl files), all inside the roots."""
    return _guard(ROOTS.expand, paths, [".jsonl"])


# Each tool asks the client for its roots, then does the file work in a worker thread (as the SDK
# runs synchronous tools), so a long export never stalls the session.


async def _threaded(ctx: Context | None, fn, *args) -> Any:
    await _refresh_roots(ctx)
    return await anyio.to_thread.run_sync(functools.partial(fn, *args))


@server.tool()
async def export(
    format: str, trajectories: list[str], output: str, min_margin: float = 0.1, ctx: Context | None = None
) -> dict[str, Any]:
    """Export trajectory JSONL files (or directories of them) as an `sft`, `dpo` or `grpo` dataset
    at `output` (new, or a file this server wrote)."""
    if format not in ("sft", "dpo", "grpo"):
        raise ToolError(f"format must be sft, dpo or grpo, got {format!r}")
    return await _threaded(ctx, _export, format, trajectories, output, min_margin)


def _export(format: str, trajectories: list[str], output: str, min_margin: float) -> dict[str, Any]:
    exporter = _guard(DatasetExporter, _inputs(trajectories))
    target = _guard(ROOTS.writable, output)
    if format == "sft":
        report = _guard(exporter.export_sft, target)
    elif format == "dpo":
        report = _guard(exporter.export_dpo, target, min_margin=min_margin)
    else:
        report = _guard(exporter.export_grpo, target)
    ROOTS.mark_written(target)
    return {"output": str(target), "written": report.written, "skipped": report.skipped}


@server.tool()
async def deduplicate(trajectories: list[str], output: str, ctx: Context | None = None) -> dict[str, Any]:
    """Write the distinct episodes (by content hash) of the given files to `output`."""
    return await _threaded(ctx, _deduplicate, trajectories, output)


def _deduplicate(trajectories: list[str], output: str) -> dict[str, Any]:
    files = _inputs(trajectories)
    target = _guard(ROOTS.writable, output)
    items = _guard(lambda: [t for p in files for t in read_trajectories(p)])
    unique = list(dedup(items))
    _guard(write_trajectories, target, unique)
    ROOTS.mark_written(target)
    return {"input": len(items), "unique": len(unique), "output": str(target)}


@server.tool()
async def evaluate(trajectories: str, ctx: Context | None = None) -> dict[str, Any]:
    """Success rate, mean reward (95% bootstrap CI) and mean steps of one run."""
    return await _threaded(ctx, _evaluate, trajectories)


def _evaluate(trajectories: str) -> dict[str, Any]:
    path = _guard(ROOTS.readable, trajectories)
    return _guard(lambda: evaluate_agent(list(read_trajectories(path))).to_dict())


@server.tool()
async def compare(runs: dict[str, str], ctx: Context | None = None) -> dict[str, Any]:
    """Compare agents ({name: trajectory file}) with significance tests and a leaderboard."""
    return await _threaded(ctx, _compare, runs)


def _compare(runs: dict[str, str]) -> dict[str, Any]:
    paths = {name: _guard(ROOTS.readable, path) for name, path in runs.items()}
    return _guard(lambda: compare_agents({name: list(read_trajectories(path)) for name, path in paths.items()}))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m trajectoryhub.mcp_server", description="MCP server (stdio) for knowlyr-hub"
    )
    global ROOTS
    _, ROOTS = parse_server_args(parser, argv)
    server.run()


if __name__ == "__main__":
    main()
