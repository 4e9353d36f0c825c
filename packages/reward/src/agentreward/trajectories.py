"""Read and write trajectory records as plain dicts (the format in docs/formats.md).

Records stay dicts rather than ``knowlyrcore.Trajectory`` models: only the fields scoring reads
or writes are checked (steps with a tool call, an observation; the task, outcome and metadata
objects) and every other field passes through untouched, so a scored file is the input file
plus rewards.

Parsing is strict, with knowlyr-core's limits: ``NaN``, ``Infinity`` and overflowing numbers
are refused (``path:line: field: non-finite number``), nesting deeper than ``MAX_JSON_DEPTH``
is refused in one line instead of a ``RecursionError``, and ``knowlyrcore.write_jsonl``, which the
package writes with, refuses to write a non-finite number.

``knowlyrcore.read_trajectories`` reads ``Trajectory`` models, so this module's readers say what
they give: ``read_trajectory_dicts`` and ``read_json_lines`` (any JSON value per line).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentreward.errors import TrajectoryFormatError
from knowlyrcore.errors import DataFormatError
from knowlyrcore.jsonl import (
    DEFAULT_MAX_LINE_BYTES,
    MAX_LINE_BYTES_ENV,
    loads_record,
    non_finite_field,
    schema_version_problem,
)


def max_line_bytes() -> int:
    """``KNOWLYR_MAX_LINE_BYTES`` when set (a positive integer), else 16 MiB."""
    value = os.environ.get(MAX_LINE_BYTES_ENV, "").strip()
    if not value:
        return DEFAULT_MAX_LINE_BYTES
    if not value.isdigit() or int(value) <= 0:
        raise TrajectoryFormatError(
            MAX_LINE_BYTES_ENV, None, f"expected a positive number of bytes, got {value[:40]!r}"
        )
    return int(value)


def loads_strict(text: str, path: str, line: int | None) -> Any:
    """Parse JSON refusing non-finite numbers and deep nesting, each as one ``TrajectoryFormatError``
    (knowlyr-core's ``loads_record``, so both packages refuse the same documents the same way)."""
    try:
        return loads_record(text, path, line)
    except DataFormatError as exc:
        raise TrajectoryFormatError(exc.path, exc.line, exc.problem, field=exc.field) from None


def check_trajectory(record: Any, path: str = "<trajectory>", line: int | None = None) -> dict[str, Any]:
    """Return ``record`` if it has the fields scoring needs, else raise naming the field."""
    if not isinstance(record, dict):
        raise TrajectoryFormatError(path, line, f"expected a JSON object, got {type(record).__name__}")
    problem = schema_version_problem(record["schema_version"]) if "schema_version" in record else None
    if problem:
        raise TrajectoryFormatError(path, line, problem, field="schema_version")
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
        if step.get("metadata") is not None and not isinstance(step["metadata"], dict):  # scoring writes into it
            raise TrajectoryFormatError(path, line, "must be an object", field=f"steps[{i}].metadata")
    task = record.get("task", {})
    if not isinstance(task, dict):
        raise TrajectoryFormatError(path, line, "must be an object", field="task")
    for name in ("outcome", "metadata"):  # read for the outcome and labels, written with the scores
        if record.get(name) is not None and not isinstance(record[name], dict):
            raise TrajectoryFormatError(path, line, "must be an object", field=name)
    return record


def _open(path: str | os.PathLike) -> Any:
    """The file opened for reading bytes; a file that cannot be opened is one line naming it."""
    try:
        return open(path, "rb")
    except OSError as exc:
        raise TrajectoryFormatError(str(path), None, exc.strerror or str(exc)) from None


def read_trajectory_dicts(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Stream trajectories from a JSONL file (or a JSON file holding one object or a list).

    At most ``KNOWLYR_MAX_LINE_BYTES`` of a line (or of a ``.json`` document) are read: a longer
    one is refused without reading the rest. UTF-16 files are named as such.
    """
    path = Path(path)
    limit = max_line_bytes()
    with _open(path) as handle:
        if handle.read(2) in (b"\xff\xfe", b"\xfe\xff"):
            raise TrajectoryFormatError(str(path), 1, "the file is UTF-16 text; convert it to UTF-8")
        handle.seek(0)
        head = handle.read(1).lstrip() if path.suffix == ".json" else b""
        handle.seek(0)
        if path.suffix == ".json" and head in (b"[", b"{"):
            parsed = _json_document(handle, str(path), limit)
            for record in parsed if isinstance(parsed, list) else [parsed]:
                yield check_trajectory(record, str(path))
            return
        for number, record in _json_lines(handle, str(path), limit):
            yield check_trajectory(record, str(path), number)


def read_json_lines(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed JSON)`` of every non-blank line of a JSONL file, with the checks of
    the trajectory readers (bounded lines, UTF-8 only, strict numbers, bounded nesting)."""
    with _open(path) as handle:
        yield from _json_lines(handle, str(path), max_line_bytes())


def read_json_document(path: str | os.PathLike) -> Any:
    """One JSON document (a calibration, a ``.json`` trajectory file), read with the same checks
    as a line: at most ``KNOWLYR_MAX_LINE_BYTES``, UTF-8, strict numbers, bounded nesting."""
    with _open(path) as handle:
        return _json_document(handle, str(path), max_line_bytes())


def _json_document(handle: Any, path: str, limit: int) -> Any:
    data = handle.read(limit + 1)
    if len(data) > limit:
        raise TrajectoryFormatError(path, None, f"larger than {limit} bytes (limit: {MAX_LINE_BYTES_ENV})")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise TrajectoryFormatError(path, 1, "the file is UTF-16 text; convert it to UTF-8")
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise TrajectoryFormatError(path, None, "not UTF-8 text") from None
    return loads_strict(text, path, None)


def _json_lines(handle: Any, path: str, limit: int) -> Iterator[tuple[int, Any]]:
    number = 0
    while raw := handle.readline(limit + 1):
        number += 1
        if number == 1 and raw.startswith((b"\xff\xfe", b"\xfe\xff")):
            raise TrajectoryFormatError(path, 1, "the file is UTF-16 text; convert it to UTF-8")
        if len(raw) > limit and not raw.endswith(b"\n"):
            raise TrajectoryFormatError(path, number, f"line longer than {limit} bytes (limit: {MAX_LINE_BYTES_ENV})")
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TrajectoryFormatError(
                path, number, f"not UTF-8 text (byte {exc.start}); is it a binary, Latin-1 or UTF-16 file?"
            ) from None
        if number == 1:
            text = text.removeprefix("\ufeff")
        yield number, loads_strict(text, path, number)


def dumps_strict(record: Any, path: str, line: int | None = None) -> str:
    """One JSON line; a NaN/Infinity anywhere is a ``TrajectoryFormatError`` naming the field."""
    try:
        return json.dumps(record, ensure_ascii=False, allow_nan=False)
    except ValueError:
        field = non_finite_field(record)
        if field is None:
            raise
        raise TrajectoryFormatError(
            path, line, "non-finite number (NaN/Infinity), refusing to write it", field=field
        ) from None


def write_atomically(path: str | os.PathLike, fill: Any) -> None:
    """Let ``fill(handle)`` write a temporary text file beside ``path``, then rename it over
    ``path``; on any error the temporary file goes and an existing ``path`` stays as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            fill(out)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
