"""Preference pairs for DPO from scored trajectories of the same task.

The pairing rule is knowlyr-core's ``knowlyrcore.datasets.pair_preferences``, the one
``knowlyr-hub export --format dpo`` applies too: ``pairing="best_vs_worst"`` (the default) pairs
each task's best trajectory against its worst; ``"all_above_margin"`` pairs every two, keeping
the ``max_pairs_per_task`` largest margins. Either way the total rewards differ by at least
``min_margin``, and a pair whose chosen trajectory failed (``outcome.success`` false) is left
out. As in the hub, trajectories without a task id or without steps (no completion to train
on) cannot be paired and are left out.

Each pair is a ``knowlyrcore.datasets.PreferenceRecord``, the record ``knowlyr-hub export
--format dpo -p`` reads: its two sides are whole trajectories, so what a step recorded (the
sampled ``token_ids`` and ``logprobs``, the scores) reaches the DPO records the hub writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from agentreward.errors import TrajectoryFormatError, UnscoredError
from knowlyrcore.datasets import DEFAULT_MIN_MARGIN, DEFAULT_PAIRING, PreferenceRecord, pair_preferences
from knowlyrcore.jsonl import validation_error
from knowlyrcore.trajectory import Trajectory


def _trajectory(record: dict[str, Any]) -> Trajectory:
    """A scored record as the ``Trajectory`` a pair holds; one the schema refuses is named by its id."""
    if record.get("reward") is None:
        raise UnscoredError(f"trajectory {record.get('id')!r} has no reward: score it first")
    try:
        return Trajectory.model_validate(record)
    except ValidationError as err:
        problem = validation_error(f"trajectory {record.get('id')!r}", None, err)
        raise TrajectoryFormatError(problem.path, None, problem.problem, field=problem.field) from None


def build_preference_pairs(
    scored: Iterable[dict[str, Any]],
    *,
    pairing: str = DEFAULT_PAIRING,
    min_margin: float = DEFAULT_MIN_MARGIN,
    max_pairs_per_task: int | None = None,
) -> list[PreferenceRecord]:
    """``PreferenceRecord`` pairs (``task_id``, ``chosen``, ``rejected``, ``margin``), largest
    margins first per task."""
    trajectories = [_trajectory(record) for record in scored]
    pairs = pair_preferences(
        (t for t in trajectories if t.steps),
        task_id=lambda t: t.task.id,
        reward=lambda t: t.reward,
        failed=lambda t: t.outcome.success is False,
        pairing=pairing,
        min_margin=min_margin,
        max_pairs_per_task=max_pairs_per_task,
    )
    return [
        PreferenceRecord(task_id=p.task_id, chosen=p.chosen, rejected=p.rejected, margin=round(p.margin, 6))
        for p in pairs
    ]
