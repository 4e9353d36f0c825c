"""MCP server (stdio) exposing convert, validate and stats as tools for agents.

Run it with ``knowlyr-recorder mcp`` or ``python -m agentrecorder.mcp_server``; it needs the
``mcp`` extra. Works with the mcp SDK 1.x (``FastMCP``) and 2.x (``MCPServer``). Tools
return JSON objects; bad input comes back as a tool error carrying the same one-line
``file[:line]: field: problem`` message as the CLI.
"""

from __future__ import annotations

from typing import Any

try:  # mcp >= 2
    from mcp.server.mcpserver import MCPServer as _Server
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as _Server
    from mcp.server.fastmcp.exceptions import ToolError

from agentrecorder.convert import convert_paths, expand_inputs, is_trajectory_file, iter_convert, load_trajectories
from agentrecorder.stats import summarize
from knowlyrcore.errors import KnowlyrError
from knowlyrcore.jsonl import read_trajectories

server = _Server("knowlyr-recorder", instructions="Convert agent framework logs into knowlyr trajectory JSONL.")


@server.tool()
def convert(inputs: list[str], output: str, format: str = "auto", skip_invalid: bool = False) -> dict[str, Any]:
    """Convert log files, directories or globs into trajectory JSONL written atomically to `output`.

    `format` is a format name (see the CLI's `formats`) or "auto". With `skip_invalid` bad
    files are reported in `failed` and the good ones still converted.
    """
    try:
        report, _ = convert_paths(inputs, output, format, skip_invalid=skip_invalid)
    except KnowlyrError as exc:
        raise ToolError(str(exc)) from None
    return {
        "output": output,
        "written": report.written,
        "converted": [
            {"path": str(f.path), "format": f.format, "trajectories": f.trajectories, "steps": f.steps}
            for f in report.converted
        ],
        "failed": [{"path": str(f.path), "error": f.error} for f in report.failed],
    }


@server.tool()
def validate(path: str, format: str = "auto") -> dict[str, Any]:
    """Check a trajectory JSONL file against the schema (or that a framework log converts)."""
    results = []
    try:
        files = expand_inputs([path])
    except KnowlyrError as exc:
        raise ToolError(str(exc)) from None
    for file in files:
        try:
            if format == "auto" and is_trajectory_file(file):
                trajectories = list(read_trajectories(file))
                kind = "trajectories"
            else:
                trajectories = list(iter_convert(file, format))
                kind = "log"
            results.append({"path": str(file), "valid": True, "kind": kind, "trajectories": len(trajectories),
                            "steps": sum(len(t.steps) for t in trajectories)})  # fmt: skip
        except KnowlyrError as exc:
            results.append({"path": str(file), "valid": False, "error": str(exc)})
    return {"valid": all(r["valid"] for r in results), "files": results}


@server.tool()
def stats(path: str, format: str = "auto") -> dict[str, Any]:
    """Steps, tool histogram, success rate and token totals of trajectories or logs at `path`."""
    try:
        files = expand_inputs([path])
        return summarize(t for file in files for t in load_trajectories(file, format))
    except KnowlyrError as exc:
        raise ToolError(str(exc)) from None


def main() -> None:
    server.run("stdio")


if __name__ == "__main__":
    main()
