"""MCP server (stdio) exposing dataset export, deduplication and agent comparison as tools.

Run it with ``knowlyr-hub mcp`` or ``python -m trajectoryhub.mcp_server`` (extra ``mcp``; the
SDK shim, error rule and launcher are ``knowlyrcore.mcp``). Bad input comes back as a tool error
carrying the same one-line ``file:line: field: problem`` message as the CLI.

Paths are the client's, so every one is checked against the allowed roots (the working
directory, or each ``--root DIR``, plus the roots the client declares; ``knowlyrcore.roots``):
inputs and outputs outside them are refused, directories are walked only inside them and only
so far, and an output never replaces a file this server did not write.
"""

from __future__ import annotations

# First, before the imports that need the mcp extra (the SDK, anyio):
if __name__ == "__main__":  # python -m trajectoryhub.mcp_server: without the SDK, one error line, no traceback
    from knowlyrcore.mcp import run_as_main

    run_as_main("knowlyr-hub", "trajectoryhub.mcp_server")

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread

from knowlyrcore import read_trajectories, write_trajectories
from knowlyrcore.mcp import Context, ToolError, guard, new_server, refresh_roots, run_server
from trajectoryhub.dedup import dedup
from trajectoryhub.evaluate import compare_agents, evaluate_agent
from trajectoryhub.export import DatasetExporter

server = new_server(
    "knowlyr-hub", instructions="Export agent trajectories as SFT/DPO/GRPO datasets and compare agents."
)


def _inputs(paths: list[str]) -> list[Path]:
    """The trajectory files `paths` name (a directory: its .jsonl files), all inside the roots."""
    with guard():
        return server.roots.expand(paths, [".jsonl"])


# Each tool asks the client for its roots, then does the file work in a worker thread (as the SDK
# runs synchronous tools), so a long export never stalls the session.


async def _threaded(ctx: Context | None, fn, *args) -> Any:
    await refresh_roots(server, ctx)
    return await anyio.to_thread.run_sync(functools.partial(fn, *args))


@server.tool()
async def export(
    format: str, trajectories: list[str], output: str, min_margin: float = 0.1, ctx: Context | None = None
) -> dict[str, Any]:
    """Export trajectory JSONL files (or directories of them) as an `sft`, `dpo` or `grpo` dataset,
    or as `atif` / `adp` interchange documents (needs knowlyr-recorder), at `output` (new, or a
    file this server wrote)."""
    if format not in ("sft", "dpo", "grpo", "atif", "adp"):
        raise ToolError(f"format must be sft, dpo, grpo, atif or adp, got {format!r}")
    return await _threaded(ctx, _export, format, trajectories, output, min_margin)


def _export(format: str, trajectories: list[str], output: str, min_margin: float) -> dict[str, Any]:
    files = _inputs(trajectories)
    with guard():
        exporter = DatasetExporter(files)
        target = server.roots.writable(output)
        if format == "sft":
            report = exporter.export_sft(target)
        elif format == "dpo":
            report = exporter.export_dpo(target, min_margin=min_margin)
        elif format in ("atif", "adp"):
            report = exporter.export_interchange(target, to=format)
        else:
            report = exporter.export_grpo(target)
    server.roots.mark_written(target)
    return {"output": str(target), "written": report.written, "skipped": report.skipped}


@server.tool()
async def deduplicate(trajectories: list[str], output: str, ctx: Context | None = None) -> dict[str, Any]:
    """Write the distinct episodes (by content hash) of the given files to `output`."""
    return await _threaded(ctx, _deduplicate, trajectories, output)


def _deduplicate(trajectories: list[str], output: str) -> dict[str, Any]:
    files = _inputs(trajectories)
    with guard():
        target = server.roots.writable(output)
        items = [t for p in files for t in read_trajectories(p)]
        unique = list(dedup(items))
        write_trajectories(target, unique)
    server.roots.mark_written(target)
    return {"input": len(items), "unique": len(unique), "output": str(target)}


@server.tool()
async def evaluate(trajectories: str, ctx: Context | None = None) -> dict[str, Any]:
    """Success rate, mean reward (95% bootstrap CI) and mean steps of one run."""
    return await _threaded(ctx, _evaluate, trajectories)


def _evaluate(trajectories: str) -> dict[str, Any]:
    with guard():
        return evaluate_agent(list(read_trajectories(server.roots.readable(trajectories)))).to_dict()


@server.tool()
async def compare(runs: dict[str, str], ctx: Context | None = None) -> dict[str, Any]:
    """Compare agents ({name: trajectory file}) with significance tests and a leaderboard."""
    return await _threaded(ctx, _compare, runs)


def _compare(runs: dict[str, str]) -> dict[str, Any]:
    with guard():
        paths = {name: server.roots.readable(path) for name, path in runs.items()}
        return compare_agents({name: list(read_trajectories(path)) for name, path in paths.items()})


def main(argv: Sequence[str] | None = None) -> int:
    return run_server(server, argv, prog="knowlyr-hub mcp")
