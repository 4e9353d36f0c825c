"""Preference pairs for DPO from scored trajectories of the same task.

Within each task, every pair of trajectories whose total rewards differ by at least
``min_margin`` gives a (chosen, rejected) pair; ``max_pairs_per_task`` keeps the pairs with
the largest margins. Trajectories without a task id cannot be paired and are skipped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from itertools import combinations
from typing import Any

from agentreward.errors import UnscoredError


def task_key(trajectory: dict[str, Any]) -> str | None:
    task = trajectory.get("task") or {}
    return str(task.get("id") or "") or None


def build_preference_pairs(
    scored: Iterable[dict[str, Any]], *, min_margin: float = 0.1, max_pairs_per_task: int | None = None
) -> list[dict[str, Any]]:
    """Return ``{"task_id", "chosen", "rejected", "margin"}`` records, largest margins first per task."""
    if min_margin < 0:
        raise ValueError("min_margin must be >= 0")
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for trajectory in scored:
        if trajectory.get("reward") is None:
            raise UnscoredError(f"trajectory {trajectory.get('id')!r} has no reward: score it first")
        key = task_key(trajectory)
        if key is not None:
            groups[key].append(trajectory)
    pairs: list[dict[str, Any]] = []
    for task_id, group in groups.items():
        candidates = []
        for a, b in combinations(group, 2):
            chosen, rejected = (a, b) if a["reward"] >= b["reward"] else (b, a)
            margin = chosen["reward"] - rejected["reward"]
            if margin >= min_margin and margin > 0:
                candidates.append((margin, chosen, rejected))
        candidates.sort(key=lambda c: -c[0])
        for margin, chosen, rejected in candidates[:max_pairs_per_task]:
            pairs.append({"task_id": task_id, "chosen": chosen, "rejected": rejected, "margin": round(margin, 6)})
    return pairs
