"""Summary statistics of a set of trajectories: steps, tool histogram, success rate, tokens.

``success_rate`` counts only trajectories somebody judged (``outcome.success`` not null);
``judged`` says how many that was, so "0 of 0" is never mistaken for "0%".

Example:
    >>> from knowlyrcore.trajectory import Trajectory, Step, ToolCall, Outcome
    >>> t = Trajectory(steps=[Step(index=0, tool_call=ToolCall(name="bash"))], outcome=Outcome(success=True))
    >>> summarize([t])["tools"]
    {'bash': 1}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from knowlyrcore.trajectory import Trajectory


def summarize(trajectories: Iterable[Trajectory]) -> dict[str, Any]:
    """One pass over ``trajectories``; returns a JSON-ready dict."""
    count = 0
    step_counts: list[int] = []
    tools: Counter[str] = Counter()
    formats: Counter[str] = Counter()
    judged = succeeded = 0
    scores: list[float] = []
    tokens = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    with_usage = 0
    cost = 0.0
    for t in trajectories:
        count += 1
        step_counts.append(len(t.steps))
        tools.update(s.tool_call.name for s in t.steps)
        formats[str(t.metadata.get("format") or (t.source or "unknown").split(":", 1)[0])] += 1
        if t.outcome.success is not None:
            judged += 1
            succeeded += int(t.outcome.success)
        if t.outcome.score is not None:
            scores.append(t.outcome.score)
        if t.usage is not None:
            with_usage += 1
            for key in tokens:
                tokens[key] += getattr(t.usage, key) or 0
            cost += t.usage.cost_usd or 0.0
    total_steps = sum(step_counts)
    return {
        "trajectories": count,
        "steps": {
            "total": total_steps,
            "mean": round(total_steps / count, 3) if count else 0.0,
            "min": min(step_counts, default=0),
            "max": max(step_counts, default=0),
        },
        "tools": dict(tools.most_common()),
        "success": {
            "judged": judged,
            "succeeded": succeeded,
            "success_rate": round(succeeded / judged, 4) if judged else None,
            "mean_score": round(sum(scores) / len(scores), 4) if scores else None,
        },
        "usage": {"trajectories_with_usage": with_usage, **tokens, "cost_usd": round(cost, 6)},
        "formats": dict(formats.most_common()),
    }


def format_summary(summary: dict[str, Any], *, top: int = 15) -> str:
    """Human-readable text of ``summarize``'s result."""
    steps, success, usage = summary["steps"], summary["success"], summary["usage"]
    rate = "n/a" if success["success_rate"] is None else f"{success['success_rate']:.1%}"
    lines = [
        f"trajectories  {summary['trajectories']}  ({', '.join(f'{k}: {v}' for k, v in summary['formats'].items())})",
        f"steps         {steps['total']} total, {steps['mean']} mean, {steps['min']}-{steps['max']} per trajectory",
        f"success       {success['succeeded']}/{success['judged']} judged ({rate})"
        + (f", mean score {success['mean_score']}" if success["mean_score"] is not None else ""),
        f"tokens        {usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion "
        f"= {usage['total_tokens']} ({usage['trajectories_with_usage']} with usage), cost ${usage['cost_usd']}",
        "tools",
    ]
    tools = list(summary["tools"].items())
    width = max((len(name) for name, _ in tools[:top]), default=0)
    biggest = max((n for _, n in tools), default=1)
    for name, n in tools[:top]:
        lines.append(f"  {name.ljust(width)}  {str(n).rjust(5)}  {'#' * max(1, round(30 * n / biggest))}")
    if len(tools) > top:
        lines.append(f"  ... {len(tools) - top} more tools")
    return "\n".join(lines)
