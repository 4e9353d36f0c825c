"""Which tasks an online-RL iteration plays, and which of its groups carry a learning signal.

- ``sequential_indices``: every task once per pass over the task list, in a seeded order.
- ``pass_rate_indices``: tasks drawn by their running pass rate. A task the policy always or
  never solves gives a group of equal rewards, so no gradient; tasks with a pass rate inside the
  band (and tasks not tried yet) are ``BAND_WEIGHT`` times likelier to be drawn than the others,
  which stay drawable because a solved task can regress and an unsolved one become learnable.
- ``informative_groups``: the groups whose valid episodes scored differently (dynamic sampling
  refills an iteration until it has enough of them, and leaves the others out of the update).

Every draw takes its ``random.Random`` from the caller, seeded from the run's seed and the
iteration, so a resumed run draws the same tasks.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: How much likelier an untried or in-band task is to be drawn than one outside the band.
BAND_WEIGHT = 10.0


def sequential_indices(n_tasks: int, iteration: int, k: int, seed: int) -> list[int]:
    """Task indices of ``iteration``: consecutive slices of seeded permutations of ``range(n_tasks)``,
    so every task is used once per pass (an iteration may span two passes)."""
    orders: dict[int, list[int]] = {}  # pass number -> its permutation
    picked = []
    for position in range(iteration * k, (iteration + 1) * k):
        epoch, offset = divmod(position, n_tasks)
        if epoch not in orders:
            orders[epoch] = list(range(n_tasks))
            random.Random(seed * 1_000_003 + epoch).shuffle(orders[epoch])
        picked.append(orders[epoch][offset])
    return picked


def pass_rate(record: Sequence[int] | None) -> float | None:
    """Successes / attempts of a ``[successes, attempts]`` record (None: never tried)."""
    if not record or record[1] == 0:
        return None
    return record[0] / record[1]


def task_weight(record: Sequence[int] | None, band: Sequence[float]) -> float:
    rate = pass_rate(record)
    return BAND_WEIGHT if rate is None or band[0] <= rate <= band[1] else 1.0


def pass_rate_indices(
    n_tasks: int,
    k: int,
    records: Mapping[str, Sequence[int]],
    band: Sequence[float],
    rng: random.Random,
    exclude: Iterable[int] = (),
) -> list[int]:
    """``k`` distinct task indices (fewer if fewer remain), drawn without replacement with
    probability proportional to ``task_weight`` (Efraimidis-Spirakis keys ``u ** (1 / w)``).
    ``records`` maps ``str(index)`` to ``[successes, attempts]``."""
    skip = set(exclude)
    keyed = []
    for index in range(n_tasks):
        u = rng.random()  # drawn for every task, so one task's record never shifts the others' draws
        if index not in skip:
            keyed.append((u ** (1.0 / task_weight(records.get(str(index)), band)), index))
    keyed.sort(reverse=True)
    return [index for _, index in keyed[:k]]


def record_outcomes(records: dict[str, list[int]], outcomes: Iterable[tuple[int, bool]]) -> None:
    """Add ``(task index, success)`` outcomes to ``records`` in place."""
    for index, success in outcomes:
        record = records.setdefault(str(index), [0, 0])
        record[0] += int(bool(success))
        record[1] += 1


def informative_groups(rollouts: Sequence[Any]) -> list[int]:
    """Group ids (in order of first appearance) whose valid rollouts have at least two different rewards."""
    rewards: dict[int, set[float]] = {}
    for r in rollouts:
        rewards.setdefault(r.group, set())
        if r.valid:
            rewards[r.group].add(r.reward)
    return [group for group, values in rewards.items() if len(values) > 1]
