"""MCP server (stdio) exposing dataset export, deduplication and agent comparison as tools.

Run it with ``python -m trajectoryhub.mcp_server`` (extra ``mcp``). Works with the mcp SDK
1.x (``FastMCP``) and 2.x (``MCPServer``). Bad input comes back as a tool error carrying the
same one-line ``file:line: field: problem`` message as the CLI.
"""

from __future__ import annotations

from typing import Any

try:  # mcp >= 2
    from mcp.server.mcpserver import MCPServer as _Server
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as _Server
    from mcp.server.fastmcp.exceptions import ToolError

from knowlyrcore import KnowlyrError, read_trajectories, write_trajectories
from trajectoryhub.dedup import dedup
from trajectoryhub.evaluate import compare_agents, evaluate_agent
from trajectoryhub.export import DatasetExporter

server = _Server("knowlyr-hub", instructions="Export agent trajectories as SFT/DPO/GRPO datasets and compare agents.")


def _guard(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (KnowlyrError, ValueError) as exc:
        raise ToolError(str(exc)) from None


@server.tool()
def export(format: str, trajectories: list[str], output: str, min_margin: float = 0.1) -> dict[str, Any]:
    """Export trajectory JSONL files as an `sft`, `dpo` or `grpo` dataset at `output`."""
    if format not in ("sft", "dpo", "grpo"):
        raise ToolError(f"format must be sft, dpo or grpo, got {format!r}")
    exporter = _guard(DatasetExporter, trajectories)
    if format == "sft":
        report = _guard(exporter.export_sft, output)
    elif format == "dpo":
        report = _guard(exporter.export_dpo, output, min_margin=min_margin)
    else:
        report = _guard(exporter.export_grpo, output)
    return {"output": output, "written": report.written, "skipped": report.skipped}


@server.tool()
def deduplicate(trajectories: list[str], output: str) -> dict[str, Any]:
    """Write the distinct episodes (by content hash) of the given files to `output`."""
    items = _guard(lambda: [t for p in trajectories for t in read_trajectories(p)])
    unique = list(dedup(items))
    _guard(write_trajectories, output, unique)
    return {"input": len(items), "unique": len(unique), "output": output}


@server.tool()
def evaluate(trajectories: str) -> dict[str, Any]:
    """Success rate, mean reward (95% bootstrap CI) and mean steps of one run."""
    return _guard(lambda: evaluate_agent(list(read_trajectories(trajectories))).to_dict())


@server.tool()
def compare(runs: dict[str, str]) -> dict[str, Any]:
    """Compare agents ({name: trajectory file}) with significance tests and a leaderboard."""
    return _guard(lambda: compare_agents({name: list(read_trajectories(path)) for name, path in runs.items()}))


def main() -> None:
    server.run()


if __name__ == "__main__":
    main()
