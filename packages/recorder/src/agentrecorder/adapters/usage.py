"""``Usage`` from the totals a log reports (ATIF's ``final_metrics``, SWE-agent's ``model_stats``)."""

from __future__ import annotations

from knowlyrcore.trajectory import Usage


def reported_usage(prompt: int | None, completion: int | None, cost: float | None, api_calls: int | None) -> Usage:
    """The reported totals as a ``Usage``; ``total_tokens`` is their sum when the log gives both."""
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion if prompt is not None and completion is not None else None,
        cost_usd=float(cost) if cost is not None else None,
        api_calls=api_calls,
    )
