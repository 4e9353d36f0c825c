"""Content-addressed storage (CAS) and deduplication of trajectories.

A trajectory's content hash covers what makes it the same episode — the task id and
description and each step's tool call and observation — and ignores what differs between
recordings of the same episode (ids, timestamps, durations, rewards). ``ContentStore`` keeps
one JSON file per hash (``objects/ab/abcdef….json``, written atomically), so storing the
same episode twice costs nothing and ``dedup`` of a JSONL file keeps first occurrences.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from knowlyrcore import Trajectory
from knowlyrcore.jsonl import write_bytes_atomic


def content_hash(t: Trajectory) -> str:
    """SHA-256 of the episode's content (see the module docstring for what counts)."""
    content = {
        "task": [t.task.id, t.task.description],
        "steps": [
            [
                s.tool_call.name,
                s.tool_call.parameters,
                s.observation.output,
                s.observation.exit_code,
                s.observation.error,
            ]
            for s in t.steps
        ],
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def dedup(trajectories: Iterable[Trajectory]) -> Iterator[Trajectory]:
    """Yield each distinct trajectory once (the first occurrence)."""
    seen: set[str] = set()
    for t in trajectories:
        key = content_hash(t)
        if key not in seen:
            seen.add(key)
            yield t


class ContentStore:
    """A folder of trajectories addressed by content hash."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        (self.root / "objects").mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / "objects" / key[:2] / f"{key}.json"

    def put(self, t: Trajectory) -> tuple[str, bool]:
        """Store ``t``; return its hash and whether it was new."""
        key = content_hash(t)
        path = self._path(key)
        if path.exists():
            return key, False
        write_bytes_atomic(path, t.model_dump_json().encode("utf-8"))
        return key, True

    def get(self, key: str) -> Trajectory:
        path = self._path(key)
        if not path.exists():
            raise KeyError(f"no trajectory with hash {key} in {self.root}")
        return Trajectory.model_validate_json(path.read_text(encoding="utf-8"))

    def __contains__(self, key: str) -> bool:
        return self._path(key).exists()

    def __iter__(self) -> Iterator[str]:
        for path in sorted((self.root / "objects").glob("*/*.json")):
            yield path.stem

    def __len__(self) -> int:
        return sum(1 for _ in self)
