"""MCP server (stdio) exposing convert, export (ATIF, ADP), validate and stats as tools for agents.

Run it with ``knowlyr-recorder mcp`` or ``python -m agentrecorder.mcp_server``; it needs the
``mcp`` extra (the SDK shim, error rule and launcher are ``knowlyrcore.mcp``). Tools
return JSON objects; bad input comes back as a tool error carrying the same one-line
``file[:line]: field: problem`` message as the CLI.

Paths are the client's, so every one is checked against the allowed roots (the working
directory, or each ``--root DIR``, plus the roots the client declares): inputs and outputs
outside them are refused, directories and globs are walked only inside them and only so far
(``knowlyrcore.roots``), and ``convert`` / ``export`` never replace a file this server did not
write.
"""

from __future__ import annotations

# First, before the imports that need the mcp extra (the SDK, anyio):
if __name__ == "__main__":  # python -m agentrecorder.mcp_server: without the SDK, one error line, no traceback
    from knowlyrcore.mcp import run_as_main

    run_as_main("knowlyr-recorder", "agentrecorder.mcp_server")

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread

from agentrecorder.convert import (
    LOG_SUFFIXES,
    convert_paths,
    expand_inputs,
    is_trajectory_file,
    iter_convert,
    load_trajectories,
)
from agentrecorder.interop import export_file
from agentrecorder.stats import summarize
from knowlyrcore.errors import KnowlyrError
from knowlyrcore.jsonl import read_trajectories
from knowlyrcore.mcp import Context, guard, new_server, refresh_roots, run_server

server = new_server("knowlyr-recorder", instructions="Convert agent framework logs into knowlyr trajectory JSONL.")


def _files(inputs: list[str]) -> list[Path]:
    """The files `inputs` name, all inside the roots; a missing one is an error naming it."""
    with guard():
        return expand_inputs(server.roots.expand(inputs, LOG_SUFFIXES))


# Each tool asks the client for its roots, then does the file work in a worker thread (as the SDK
# runs synchronous tools), so a long conversion never stalls the session.


@server.tool()
async def convert(
    inputs: list[str], output: str, format: str = "auto", skip_invalid: bool = False, ctx: Context | None = None
) -> dict[str, Any]:
    """Convert log files, directories or globs into trajectory JSONL written atomically to `output`.

    `format` is a format name (see the CLI's `formats`) or "auto". With `skip_invalid` bad
    files are reported in `failed` and the good ones still converted. `output` must be new or
    a file this server wrote.
    """
    await refresh_roots(server, ctx)
    return await anyio.to_thread.run_sync(functools.partial(_convert, inputs, output, format, skip_invalid))


def _convert(inputs: list[str], output: str, format: str, skip_invalid: bool) -> dict[str, Any]:
    files = _files(inputs)
    with guard():
        target = server.roots.writable(output)
        report, _ = convert_paths(files, target, format, skip_invalid=skip_invalid)
    server.roots.mark_written(target)
    return {
        "output": str(target),
        "written": report.written,
        "converted": [
            {"path": str(f.path), "format": f.format, "trajectories": f.trajectories, "steps": f.steps}
            for f in report.converted
        ],
        "failed": [{"path": str(f.path), "error": f.error} for f in report.failed],
    }


@server.tool()
async def export(
    inputs: list[str], output: str, to: str, format: str = "auto", ctx: Context | None = None
) -> dict[str, Any]:
    """Write logs, data sets or trajectory JSONL as `to` ("atif" or "adp") documents at `output`.

    A `.jsonl` output gets one document per line (streamed), any other one JSON document. The
    write is atomic; `output` must be new or a file this server wrote.
    """
    await refresh_roots(server, ctx)
    return await anyio.to_thread.run_sync(functools.partial(_export, inputs, output, to, format))


def _export(inputs: list[str], output: str, to: str, format: str) -> dict[str, Any]:
    files = _files(inputs)
    with guard():
        target = server.roots.writable(output)
        written = export_file(files, target, to, format, progress=False)
    server.roots.mark_written(target)
    return {"output": str(target), "to": to, "written": written}


@server.tool()
async def validate(path: str, format: str = "auto", ctx: Context | None = None) -> dict[str, Any]:
    """Check a trajectory JSONL file against the schema (or that a framework log converts)."""
    await refresh_roots(server, ctx)
    return await anyio.to_thread.run_sync(functools.partial(_validate, path, format))


def _validate(path: str, format: str) -> dict[str, Any]:
    results = []
    for file in _files([path]):
        try:
            if format == "auto" and is_trajectory_file(file):
                trajectories = list(read_trajectories(file))
                kind = "trajectories"
            else:
                trajectories = list(iter_convert(file, format))
                kind = "log"
            results.append(
                {
                    "path": str(file),
                    "valid": True,
                    "kind": kind,
                    "trajectories": len(trajectories),
                    "steps": sum(len(t.steps) for t in trajectories),
                }
            )
        except KnowlyrError as exc:
            results.append({"path": str(file), "valid": False, "error": str(exc)})
    return {"valid": all(r["valid"] for r in results), "files": results}


@server.tool()
async def stats(path: str, format: str = "auto", ctx: Context | None = None) -> dict[str, Any]:
    """Steps, tool histogram, success rate and token totals of trajectories or logs at `path`."""
    await refresh_roots(server, ctx)
    return await anyio.to_thread.run_sync(functools.partial(_stats, path, format))


def _stats(path: str, format: str) -> dict[str, Any]:
    files = _files([path])
    with guard():
        return summarize(t for file in files for t in load_trajectories(file, format))


def main(argv: Sequence[str] | None = None) -> int:
    return run_server(server, argv, prog="knowlyr-recorder mcp")
