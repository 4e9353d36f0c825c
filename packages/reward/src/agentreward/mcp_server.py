"""MCP server (stdio) exposing scoring, preference pairs and rubrics as tools for agents.

Run it with ``python -m agentreward.mcp_server`` (extra ``mcp``). Works with the mcp SDK 1.x
(``FastMCP``) and 2.x (``MCPServer``). Bad input comes back as a tool error carrying the same
one-line ``file:line: field: problem`` message as the CLI.
"""

from __future__ import annotations

from typing import Any

try:  # mcp >= 2
    from mcp.server.mcpserver import MCPServer as _Server
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as _Server
    from mcp.server.fastmcp.exceptions import ToolError

from agentreward.engine import RewardEngine
from agentreward.errors import RewardError
from agentreward.preferences import build_preference_pairs
from agentreward.rubrics import RUBRICS, domain_weights
from agentreward.trajectories import read_trajectories, write_jsonl

server = _Server("knowlyr-reward", instructions="Score agent trajectories step by step with a process reward model.")


@server.tool()
def score(input: str, output: str, domain: str | None = None) -> dict[str, Any]:
    """Score every trajectory of the JSONL file `input` into `output`; returns each total reward."""
    try:
        engine = RewardEngine(domain=domain)
        scored = list(engine.score_many(read_trajectories(input)))
        write_jsonl(output, scored)
    except (RewardError, ValueError) as exc:
        raise ToolError(str(exc)) from None
    return {"output": output, "scored": len(scored), "rewards": [t["reward"] for t in scored]}


@server.tool()
def pairs(input: str, output: str, min_margin: float = 0.1) -> dict[str, Any]:
    """Build DPO preference pairs from the scored trajectories in `input`."""
    try:
        built = build_preference_pairs(read_trajectories(input), min_margin=min_margin)
        write_jsonl(output, built)
    except (RewardError, ValueError) as exc:
        raise ToolError(str(exc)) from None
    return {"output": output, "pairs": len(built)}


@server.tool()
def rubrics(domain: str = "generic") -> dict[str, Any]:
    """The rubrics, which layer judges each, and the domain's weights."""
    weights = domain_weights(domain)
    return {name: {"evaluator": r.evaluator, "description": r.description, "weight": weights[name]}
            for name, r in RUBRICS.items()}  # fmt: skip


def main() -> None:
    server.run()


if __name__ == "__main__":
    main()
