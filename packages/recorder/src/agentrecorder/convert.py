"""Convert log files into trajectories: one file (``iter_convert``) or a batch (``convert_paths``).

A file is read by ``loading.load_records``; the format is either named or detected from the
first record; each record goes through the adapter. Every problem surfaces as one
``ConversionError`` naming the file, the line (JSONL) and the JSON path of the bad field:
adapters raise ``FieldError`` (path only) and schema violations raise pydantic errors, and
both are rewritten here.

A batch expands directories and globs, converts file by file and writes all trajectories
with one atomic ``write_trajectories``; with ``skip_invalid`` a bad file is reported and
skipped (each file is buffered, so none of a bad file's records are written), otherwise
trajectories stream to the output (memory stays flat for big JSONL) and the first bad file
aborts the batch with nothing written. An existing output is replaced only by a batch that
converted something: when every file failed it is left as it was.

A JSON file holding one array is either one log (an OpenHands event list, a bare chat) or a
data set of rows (a Hugging Face export, an ADP file, tau-bench results): it is a data set when
its first element is an object some adapter accepts (the named one, or any under ``auto``).
Rows are then read incrementally (``loading.iter_array``), so a 100,000-row file converts in
the memory of one row; errors name the row as the start of their JSON path (``$[41].content``).

``iter_convert(..., on_error=f)`` goes record by record instead: a bad record (a broken JSONL
line or data-set row, one the adapter rejects) is passed to ``f`` and skipped, and the file's
good records are kept (the hub pipeline's ``--skip-invalid``).

Example:
    >>> import json, tempfile, pathlib
    >>> log = pathlib.Path(tempfile.mkdtemp()) / "run.traj"
    >>> _ = log.write_text(json.dumps({"trajectory": [{"action": "submit", "observation": ""}]}))
    >>> [t.tool_names for t in convert_file(log)]
    [['submit']]
"""

from __future__ import annotations

import glob
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentrecorder.adapters.base import Adapter
from agentrecorder.detect import detect
from agentrecorder.errors import ConversionError, FieldError, UnknownFormatError
from agentrecorder.loading import iter_array, iter_jsonl, load_records, looks_like_jsonl, sniff, starts_an_array
from agentrecorder.registry import get_adapter
from knowlyrcore.errors import DataFormatError
from knowlyrcore.jsonl import bounded_lines, default_max_line_bytes, format_field_path, write_trajectories
from knowlyrcore.trajectory import Trajectory

#: file names a directory walk picks up
LOG_SUFFIXES = (".json", ".jsonl", ".ndjson", ".traj")


@dataclass
class FileResult:
    """What happened to one input file."""

    path: Path
    format: str = ""
    detection: str = ""
    trajectories: int = 0
    steps: int = 0
    error: str | None = None


@dataclass
class BatchReport:
    """The outcome of ``convert_paths``: per-file results and how many trajectories were written."""

    files: list[FileResult] = field(default_factory=list)
    written: int = 0

    @property
    def failed(self) -> list[FileResult]:
        return [f for f in self.files if f.error is not None]

    @property
    def converted(self) -> list[FileResult]:
        return [f for f in self.files if f.error is None]


def convert_record(
    adapter: Adapter,
    record: Any,
    *,
    path: str | os.PathLike = "<input>",
    line: int | None = None,
    where: str = "$",
) -> Iterator[Trajectory]:
    """Run one record through ``adapter``, turning every problem into a ``ConversionError``.

    ``where`` is the record's own JSON path in its file (``$[7]`` for a data-set row); error
    paths are given from there."""
    try:
        yield from adapter.convert(record, source=f"{adapter.name}:{path}")
    except FieldError as exc:
        raise ConversionError(str(path), line, exc.message, field=where + exc.where.removeprefix("$")) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConversionError(
            str(path),
            line,
            f"does not fit the trajectory schema: {first['msg']}",
            field=f"{exc.title}.{format_field_path(first['loc'])}",
        ) from None
    except RecursionError:
        raise ConversionError(str(path), line, "nesting too deep to convert") from None


def iter_convert(
    path: str | os.PathLike,
    fmt: str = "auto",
    *,
    result: FileResult | None = None,
    on_error: Callable[[DataFormatError], None] | None = None,
) -> Iterator[Trajectory]:
    """Yield the trajectories of one log file; ``result`` (if given) records format and counts.

    With ``on_error`` a bad record is passed there and skipped; the file still fails as a whole
    when it cannot be read or none of its records converts.
    """
    path = Path(path)
    result = result if result is not None else FileResult(path)
    adapter = None if fmt == "auto" else get_adapter(fmt)
    for line, where, record in iter_records(path, adapter, on_error=on_error):
        try:
            if adapter is None:
                detection = detect(record, str(path), line)
                adapter = detection.adapter
                result.detection = detection.describe()
            else:  # named formats, and every record after the one that decided the format
                why = adapter.check(record)
                if why is not None:
                    field = where if where != "$" else None
                    raise ConversionError(str(path), line, f"not in the {adapter.name} format: {why}", field=field)
            result.format = adapter.name
            converted = list(convert_record(adapter, record, path=path, line=line, where=where))
        except ConversionError as exc:
            if on_error is None or (line is None and where == "$"):  # a one-document file fails as a whole
                raise
            on_error(exc)
            continue
        for trajectory in converted:
            if not trajectory.id:
                first = result.trajectories == 0 and line is None
                trajectory.id = path.stem if first else f"{path.stem}#{result.trajectories}"
            result.trajectories += 1
            result.steps += len(trajectory.steps)
            yield trajectory
    if result.trajectories == 0:
        what = f"({adapter.name})" if adapter is not None else "(no record in a known format)"
        raise ConversionError(str(path), None, f"no trajectories found {what}")


def _is_row(record: Any, adapter: Adapter | None) -> bool:
    """Whether the first element of a JSON array is a record of its own (the array a data set)."""
    if not isinstance(record, dict):
        return False
    if adapter is not None:
        return adapter.check(record) is None
    try:
        detect(record)
    except UnknownFormatError:
        return False
    return True


def iter_records(
    path: str | os.PathLike,
    adapter: Adapter | None = None,
    *,
    on_error: Callable[[DataFormatError], None] | None = None,
) -> Iterator[tuple[int | None, str, Any]]:
    """Yield ``(line, where, record)`` for each record of a log file.

    JSONL gives one record per line (``where`` is ``$``); a JSON array whose first element
    ``adapter`` accepts (any adapter when ``None``) gives one per row, read incrementally
    (``line`` is ``None``, ``where`` is ``$[i]``); any other JSON file is one record. With
    ``on_error`` a JSONL file's unreadable lines are reported there and skipped.
    """
    path = Path(path)
    head = sniff(path)
    if looks_like_jsonl(path, head):
        for line, record in iter_jsonl(path, on_error):
            yield line, "$", record
        return
    if starts_an_array(head):
        rows = iter_array(path)
        try:
            first = next(rows, None)
        except ConversionError:  # read whole below, for the error's line and column
            first = None
        if first is not None and _is_row(first[1], adapter):
            for index, row in itertools.chain([first], rows):
                yield None, f"$[{index}]", row
            return
        rows.close()
    for line, record in load_records(path):
        yield line, "$", record


def convert_file(path: str | os.PathLike, fmt: str = "auto") -> list[Trajectory]:
    """All trajectories of one log file (``fmt`` a format name or ``"auto"``)."""
    return list(iter_convert(path, fmt))


def expand_inputs(inputs: Iterable[str | os.PathLike]) -> list[Path]:
    """Files named by ``inputs``: files as given, directories walked, globs expanded (sorted)."""
    files: list[Path] = []
    for item in inputs:
        text = str(item)
        candidate = Path(text)
        if candidate.is_dir():
            found = sorted(p for p in candidate.rglob("*") if p.is_file() and p.suffix.lower() in LOG_SUFFIXES)
            if not found:
                raise ConversionError(text, None, f"directory has no log files ({', '.join(LOG_SUFFIXES)})")
            files.extend(found)
        elif candidate.exists():
            files.append(candidate)
        elif glob.has_magic(text):
            matches = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
            if not matches:
                raise ConversionError(text, None, "glob matches no files")
            files.extend(matches)
        else:
            raise ConversionError(text, None, "no such file or directory")
    return files


def convert_paths(
    inputs: Iterable[str | os.PathLike],
    output: str | os.PathLike | None,
    fmt: str = "auto",
    *,
    skip_invalid: bool = False,
) -> tuple[BatchReport, list[Trajectory]]:
    """Convert every input file; write the trajectories to ``output`` (JSONL, atomic).

    With ``output=None`` nothing is written and the trajectories are returned instead (the
    list is empty when writing). Raises the first ``ConversionError`` unless ``skip_invalid``.
    """
    if fmt != "auto":
        get_adapter(fmt)  # an unknown format name fails before any file is read
    if output is not None and Path(output).is_dir():
        raise ConversionError(str(output), None, "output is a directory; name a .jsonl file")
    report = BatchReport()
    collected: list[Trajectory] = []

    class NothingConverted(Exception):
        """Every file failed: abort the atomic write so an existing output stays as it was."""

    def generate() -> Iterator[Trajectory]:
        for path in expand_inputs(inputs):
            result = FileResult(path)
            report.files.append(result)
            if not skip_invalid:  # stream: a failure aborts the whole (atomic) write anyway
                try:
                    yield from iter_convert(path, fmt, result=result)
                except ConversionError as exc:
                    result.error = str(exc)
                    raise
                continue
            try:  # buffer the file so a bad record halfway leaves none of its trajectories behind
                converted = list(iter_convert(path, fmt, result=result))
            except ConversionError as exc:
                result.error = str(exc)
                continue
            yield from converted
        if not report.converted:
            raise NothingConverted

    try:
        if output is None:
            collected = list(generate())
            report.written = len(collected)
        else:
            report.written = write_trajectories(output, generate())
    except NothingConverted:
        report.written = 0
    return report, collected


def is_trajectory_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is already trajectory JSONL (first record has ``schema_version``, not an
    ATIF one, and ``steps``).

    Only the first non-blank line is read, at most ``KNOWLYR_MAX_LINE_BYTES`` of it: a longer one
    is no trajectory line (the log reader then names it); a file that opens a JSON array (a data
    set on one line, perhaps) is none either, and no line of it is read."""
    try:
        with open(path, "rb") as handle:
            if starts_an_array(handle.read(4096)):
                return False
            handle.seek(0)
            for _, raw in bounded_lines(handle, default_max_line_bytes()):
                if raw is None:
                    return False
                if raw.strip():
                    record = json.loads(raw)
                    if not isinstance(record, dict) or "steps" not in record:
                        return False
                    version = record.get("schema_version")  # an ATIF document has both fields too
                    return version is not None and not (isinstance(version, str) and version.startswith("ATIF-"))
    except (OSError, ValueError, RecursionError):
        return False
    return False


def load_trajectories(path: str | os.PathLike, fmt: str = "auto") -> Iterator[Trajectory]:
    """Trajectories from trajectory JSONL as they are, or converted from a framework log."""
    from knowlyrcore.jsonl import read_trajectories

    if fmt == "auto" and is_trajectory_file(path):
        return read_trajectories(path)
    return iter_convert(path, fmt)
