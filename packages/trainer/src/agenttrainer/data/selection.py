"""Which examples an epoch trains on: curriculum, coreset selection, replay, task weights.

All functions are deterministic given their ``random.Random``.

* curriculum (``curriculum_start_ratio``, ``curriculum_warmup_epochs``): examples ordered easy to
  hard (fewer steps first, then higher reward first); epoch ``e`` uses the easiest fraction
  ``start + (1 - start) * e / warmup_epochs`` (capped at 1).
* coreset (``loss_topk`` / ``diversity`` / ``hybrid`` / ``random``): keep ``target_size``
  examples — the highest-loss ones, a farthest-point cover of token-bag features, half of each,
  or a uniform sample.
* replay: a bounded rehearsal buffer of past examples; each run mixes in ``ratio * n`` of them.
* task weights: resample an epoch so task types appear in the given proportions.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agenttrainer.data.formatting import Example
from agenttrainer.data.readers import DataError, read_located_records

CORESET_STRATEGIES = ("loss_topk", "diversity", "hybrid", "random")


def difficulty_key(ex: Example) -> tuple[float, float, int]:
    reward = ex.meta.get("reward")
    return (ex.meta.get("num_steps") or 0, -(reward if reward is not None else 0.0), len(ex))


def curriculum_fraction(epoch: int, start_ratio: float, warmup_epochs: int) -> float:
    """Fraction of the (easy-first) data used in ``epoch`` (0-based): 0.3, 0.65, 1.0 for start 0.3, warmup 2."""
    if warmup_epochs <= 0:
        return 1.0
    return min(1.0, start_ratio + (1.0 - start_ratio) * epoch / warmup_epochs)


def curriculum_indices(examples: Sequence[Example], epoch: int, start_ratio: float, warmup_epochs: int) -> list[int]:
    order = sorted(range(len(examples)), key=lambda i: difficulty_key(examples[i]))
    keep = max(1, math.ceil(len(order) * curriculum_fraction(epoch, start_ratio, warmup_epochs)))
    return sorted(order[:keep])


def _features(ex: Example, dim: int = 256) -> list[float]:
    counts = Counter(t % dim for t in ex.input_ids)
    norm = math.sqrt(sum(c * c for c in counts.values())) or 1.0
    vec = [0.0] * dim
    for k, c in counts.items():
        vec[k] = c / norm
    return vec


def _farthest_point(examples: Sequence[Example], candidates: list[int], k: int, rng: random.Random) -> list[int]:
    if k <= 0 or not candidates:
        return []
    feats = {i: _features(examples[i]) for i in candidates}
    chosen = [rng.choice(candidates)]
    best = {i: 1.0 - sum(a * b for a, b in zip(feats[i], feats[chosen[0]])) for i in candidates}
    while len(chosen) < min(k, len(candidates)):
        nxt = max((i for i in candidates if i not in chosen), key=lambda i: (best[i], -i))
        chosen.append(nxt)
        for i in candidates:
            best[i] = min(best[i], 1.0 - sum(a * b for a, b in zip(feats[i], feats[nxt])))
    return chosen


def coreset_indices(
    examples: Sequence[Example], losses: Sequence[float] | None, strategy: str, target_size: int, rng: random.Random
) -> list[int]:
    """Indices of at most ``target_size`` examples chosen by ``strategy`` (sorted)."""
    if strategy not in CORESET_STRATEGIES:
        raise ValueError(f"coreset_strategy must be one of {CORESET_STRATEGIES}, got {strategy!r}")
    n = len(examples)
    if target_size >= n:
        return list(range(n))
    if strategy in ("loss_topk", "hybrid") and losses is None:
        raise ValueError(f"coreset_strategy={strategy!r} needs per-example losses")
    if strategy == "random":
        return sorted(rng.sample(range(n), target_size))
    if strategy == "loss_topk":
        return sorted(sorted(range(n), key=lambda i: (-losses[i], i))[:target_size])
    if strategy == "diversity":
        return sorted(_farthest_point(examples, list(range(n)), target_size, rng))
    top = sorted(range(n), key=lambda i: (-losses[i], i))[: target_size // 2]
    rest = [i for i in range(n) if i not in set(top)]
    return sorted(top + _farthest_point(examples, rest, target_size - len(top), rng))


def task_weighted_indices(examples: Sequence[Example], weights: dict[str, float], rng: random.Random) -> list[int]:
    """An epoch of ``len(examples)`` indices where task type ``t`` makes up ``weights[t] / sum`` of it.

    Types absent from ``weights`` are dropped; types in ``weights`` absent from the data raise.
    """
    by_type: dict[str, list[int]] = defaultdict(list)
    for i, ex in enumerate(examples):
        by_type[ex.meta.get("task_type") or ""].append(i)
    missing = [t for t in weights if t not in by_type]
    if missing:
        raise ValueError(f"task_weights names task types with no examples: {missing}")
    total = sum(weights.values())
    if total <= 0:
        raise ValueError("task_weights must sum to a positive number")
    out = []
    for t, w in weights.items():
        pool = by_type[t]
        count = round(len(examples) * w / total)
        out += [pool[k % len(pool)] for k in rng.sample(range(max(count, len(pool))), count)]
    rng.shuffle(out)
    return out


class ReplayBuffer:
    """A bounded rehearsal buffer (reservoir sampling) persisted as JSONL.

    Example:
        >>> buf = ReplayBuffer(capacity=2, seed=0)
        >>> buf.add([{"id": i} for i in range(5)])
        >>> len(buf.items), buf.seen
        (2, 5)
    """

    def __init__(self, capacity: int, *, seed: int = 0):
        if capacity <= 0:
            raise ValueError(f"replay buffer capacity must be positive, got {capacity}")
        self.capacity, self.items, self.seen = capacity, [], 0
        self._rng = random.Random(seed)

    def add(self, records: Sequence[dict[str, Any]]) -> None:
        for rec in records:
            self.seen += 1
            if len(self.items) < self.capacity:
                self.items.append(rec)
            else:
                j = self._rng.randrange(self.seen)
                if j < self.capacity:
                    self.items[j] = rec

    def sample(self, count: int) -> list[dict[str, Any]]:
        return self._rng.sample(self.items, min(count, len(self.items)))

    def save(self, path: str | Path) -> None:
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(json.dumps({"seen": self.seen, "capacity": self.capacity}) + "\n")
            for rec in self.items:
                fh.write(json.dumps(rec, ensure_ascii=False, allow_nan=False) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path, capacity: int, *, seed: int = 0) -> ReplayBuffer:
        buf = cls(capacity, seed=seed)
        path = Path(path)
        if path.exists():  # read like training data: streamed, line length bounded, NaN refused
            lines = read_located_records(path)
            header = next(lines, None)
            if header is not None:
                where, fields = header
                if not isinstance(fields.get("seen"), int) or isinstance(fields["seen"], bool):
                    raise DataError(f"{where}: seen: expected the replay buffer's header with an integer 'seen'")
                buf.seen = fields["seen"]
                buf.items = [record for _, record in itertools.islice(lines, capacity)]
        return buf
