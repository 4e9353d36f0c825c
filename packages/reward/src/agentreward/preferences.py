"""Preference pairs for DPO from scored trajectories of the same task.

The pairing rule is knowlyr-core's ``knowlyrcore.datasets.pair_preferences``, the one
``knowlyr-hub export --format dpo`` applies too: ``pairing="best_vs_worst"`` (the default) pairs
each task's best trajectory against its worst; ``"all_above_margin"`` pairs every two, keeping
the ``max_pairs_per_task`` largest margins. Either way the total rewards differ by at least
``min_margin``, and a pair whose chosen trajectory failed (``outcome.success`` false) is left
out. Trajectories without a task id cannot be paired and are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentreward.errors import UnscoredError
from knowlyrcore.datasets import DEFAULT_MIN_MARGIN, DEFAULT_PAIRING, pair_preferences


def task_key(trajectory: dict[str, Any]) -> str | None:
    task = trajectory.get("task") or {}
    return str(task.get("id") or "") or None


def _failed(trajectory: dict[str, Any]) -> bool:
    outcome = trajectory.get("outcome")
    return isinstance(outcome, dict) and outcome.get("success") is False


def build_preference_pairs(
    scored: Iterable[dict[str, Any]],
    *,
    pairing: str = DEFAULT_PAIRING,
    min_margin: float = DEFAULT_MIN_MARGIN,
    max_pairs_per_task: int | None = None,
) -> list[dict[str, Any]]:
    """Return ``{"task_id", "chosen", "rejected", "margin"}`` records, largest margins first per task."""
    trajectories = list(scored)
    for trajectory in trajectories:
        if trajectory.get("reward") is None:
            raise UnscoredError(f"trajectory {trajectory.get('id')!r} has no reward: score it first")
    pairs = pair_preferences(
        trajectories,
        task_id=task_key,
        reward=lambda t: t["reward"],
        failed=_failed,
        pairing=pairing,
        min_margin=min_margin,
        max_pairs_per_task=max_pairs_per_task,
    )
    return [
        {"task_id": p.task_id, "chosen": p.chosen, "rejected": p.rejected, "margin": round(p.margin, 6)} for p in pairs
    ]
