"""``Recorder``: record a live agent step by step and flush JSONL atomically.

A live agent outside any environment records with ``Recorder.episode()``; an environment run
through core's ``RecorderWrapper`` hands each finished episode to ``recorder.add`` (its
``on_episode_end`` callback). Both paths build core ``Trajectory`` objects through
``TrajectoryBuilder``, the same schema the adapters produce from logs, so a live episode and
a converted log are interchangeable downstream.

Trajectories are buffered and written by ``flush()`` (and on leaving the ``with`` block)
through ``write_trajectories``: a temporary file renamed over the target, appended to what
is already there, so a crash never leaves half a line.

Example:
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "live.jsonl"
    >>> with Recorder(out, agent="doc") as rec:
    ...     with rec.episode("list the files") as ep:
    ...         _ = ep.step("bash", {"command": "ls"}, "a.txt", exit_code=0, thought="look first")
    ...         _ = ep.finish(success=True)
    >>> from knowlyrcore.jsonl import read_trajectories
    >>> [t.tool_names for t in read_trajectories(out)]
    [['bash']]
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from typing_extensions import Unpack

from knowlyrcore.jsonl import write_trajectories
from knowlyrcore.models import TaskInfo
from knowlyrcore.recording import StepFields, TrajectoryBuilder
from knowlyrcore.trajectory import Step, Trajectory


class Episode:
    """One episode being recorded; finish it with ``finish()`` or by leaving its ``with`` block."""

    def __init__(self, recorder: Recorder, builder: TrajectoryBuilder):
        self._recorder = recorder
        self._builder = builder
        self.trajectory: Trajectory | None = None

    @property
    def steps(self) -> list[Step]:
        return self._builder.steps

    def step(
        self, tool: str, parameters: dict[str, Any] | None = None, observation: Any = "", **fields: Unpack[StepFields]
    ) -> Step:
        """Record one tool call and what it returned (``thought``, ``exit_code``, ``duration_s``...)."""
        fields.setdefault("timestamp", time.time() - (fields.get("duration_s") or 0.0))
        return self._builder.add_step({"tool": tool, "params": parameters or {}}, observation, **fields)

    def finish(self, **outcome: Any) -> Trajectory:
        """End the episode (``success``, ``score``, ``exit_status``, ``patch``, ``usage``...)."""
        if self.trajectory is None:
            outcome.setdefault("terminated", True)
            self.trajectory = self._builder.finish(**outcome)
            self._recorder.add(self.trajectory)
        return self.trajectory

    def __enter__(self) -> Episode:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.trajectory is not None:
            return
        if exc_type is None:
            self.finish()
        else:
            self.finish(exit_status=f"error: {exc_type.__name__}: {exc}", terminated=False, truncated=True)


class Recorder:
    """Buffers trajectories (recorded live or handed over by ``RecorderWrapper``) and writes them."""

    def __init__(
        self,
        output_path: str | os.PathLike | None = None,
        *,
        agent: str = "",
        model: str = "",
        source: str = "recorder",
    ):
        self.output_path = Path(output_path) if output_path is not None else None
        self.agent = agent
        self.model = model
        self.source = source
        self.pending: list[Trajectory] = []
        self.written = 0

    def episode(self, task: TaskInfo | dict | str | None = None, **metadata: Any) -> Episode:
        """Start recording an episode of ``task``."""
        builder = TrajectoryBuilder(task, agent=self.agent, model=self.model, source=self.source, metadata=metadata)
        return Episode(self, builder)

    def add(self, trajectory: Trajectory) -> None:
        """Queue a finished trajectory (usable as ``RecorderWrapper(on_episode_end=...)``)."""
        self.pending.append(trajectory)

    def flush(self) -> int:
        """Append the queued trajectories to ``output_path`` atomically; return how many."""
        if self.output_path is None or not self.pending:
            return 0
        count = write_trajectories(self.output_path, self.pending, append=True)
        self.pending.clear()
        self.written += count
        return count

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.flush()
