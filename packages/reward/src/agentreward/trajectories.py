"""Read and write trajectory records as plain dicts (the format in docs/formats.md).

knowlyr-reward deliberately does not import knowlyr-core: it checks only the fields it reads
(steps with a tool call, an observation) and passes every other field through untouched, so
a scored file is the input file plus rewards.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from agentreward.errors import TrajectoryFormatError


def check_trajectory(record: Any, path: str = "<trajectory>", line: int | None = None) -> dict[str, Any]:
    """Return ``record`` if it has the fields scoring needs, else raise naming the field."""
    if not isinstance(record, dict):
        raise TrajectoryFormatError(path, line, f"expected a JSON object, got {type(record).__name__}")
    steps = record.get("steps")
    if not isinstance(steps, list):
        raise TrajectoryFormatError(path, line, "must be a list of steps", field="steps")
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            raise TrajectoryFormatError(path, line, "must be an object", field=f"steps[{i}]")
        call = step.get("tool_call")
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
            raise TrajectoryFormatError(
                path, line, "must be an object with a non-empty name", field=f"steps[{i}].tool_call"
            )
        if not isinstance(call.get("parameters", {}), dict):
            raise TrajectoryFormatError(path, line, "must be an object", field=f"steps[{i}].tool_call.parameters")
        obs = step.get("observation", {})
        if not isinstance(obs, dict):
            raise TrajectoryFormatError(path, line, "must be an object", field=f"steps[{i}].observation")
    task = record.get("task", {})
    if not isinstance(task, dict):
        raise TrajectoryFormatError(path, line, "must be an object", field="task")
    return record


def read_trajectories(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Stream trajectories from a JSONL file (or a JSON file holding one object or a list)."""
    path = Path(path)
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the with below; open errors need their own message
    except OSError as exc:
        raise TrajectoryFormatError(str(path), None, exc.strerror or str(exc)) from None
    with handle:
        head = handle.read(1).lstrip() if path.suffix == ".json" else b""
        handle.seek(0)
        if path.suffix == ".json" and head in (b"[", b"{"):
            try:
                data = json.loads(handle.read().decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise TrajectoryFormatError(str(path), getattr(exc, "lineno", None), f"invalid JSON: {exc}") from None
            for record in data if isinstance(data, list) else [data]:
                yield check_trajectory(record, str(path))
            return
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise TrajectoryFormatError(str(path), number, "not UTF-8 text") from None
            except json.JSONDecodeError as exc:
                raise TrajectoryFormatError(
                    str(path), number, f"invalid JSON: {exc.msg} (column {exc.colno})"
                ) from None
            yield check_trajectory(record, str(path), number)


def write_jsonl(path: str | os.PathLike, records: Iterable[dict[str, Any]]) -> int:
    """Write records atomically (temporary file, then rename); return how many."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            for record in records:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count
