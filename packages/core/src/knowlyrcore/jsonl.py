"""JSONL reading and writing: streaming reads with precise errors, atomic writes.

Reads never load a whole file: records come one line at a time, so a 50 GB dump costs the
memory of its longest line. Every problem (bad UTF-8, broken JSON, a field of the wrong type)
raises ``DataFormatError`` naming the file, the 1-based line and the dotted field path.

JSON is parsed strictly (``loads_record``): ``NaN``, ``Infinity`` and numbers too large for a
float are refused (a reward or score must be a finite number), and so is nesting deeper than
``MAX_JSON_DEPTH`` levels, which no trajectory needs and which would otherwise end in a
``RecursionError`` somewhere downstream. Writers refuse non-finite numbers the same way.

A line longer than ``KNOWLYR_MAX_LINE_BYTES`` (16 MiB unless set) is refused after reading only
that many bytes, UTF-16 files are named as such, and a record carrying ``schema_version`` must
be a ``1.x`` one (``check_schema_version``); records without it are taken as the current version.

Writes go to a temporary file in the target directory and are renamed over the target only
when complete, so a crash never leaves a half-written dataset behind.

Examples:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "t.jsonl"
    >>> write_jsonl(path, [{"a": 1}, {"a": 2}])
    2
    >>> sum(r["a"] for r in read_jsonl(path))
    3
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from knowlyrcore.errors import DataFormatError, os_problem

ModelT = TypeVar("ModelT", bound=BaseModel)

#: deepest nesting of objects and arrays a record may have
MAX_JSON_DEPTH = 100

#: the version every record written by knowlyr carries; readers accept any ``1.x``
SCHEMA_VERSION = "1.0"

#: environment variable bounding one line of a JSONL file, in bytes
MAX_LINE_BYTES_ENV = "KNOWLYR_MAX_LINE_BYTES"
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024


def default_max_line_bytes() -> int:
    """``KNOWLYR_MAX_LINE_BYTES`` when set (a positive integer), else 16 MiB."""
    value = os.environ.get(MAX_LINE_BYTES_ENV)
    if value is None or not value.strip():
        return DEFAULT_MAX_LINE_BYTES
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if limit <= 0:
        raise DataFormatError(MAX_LINE_BYTES_ENV, None, f"expected a positive number of bytes, got {value[:40]!r}")
    return limit


def schema_version_problem(value: Any) -> str | None:
    """Why ``value`` is not a ``schema_version`` this reader accepts, or None when it is."""
    if not isinstance(value, str):
        return f"must be a string like {SCHEMA_VERSION!r}, got {type(value).__name__}"
    if value.split(".", 1)[0] != SCHEMA_VERSION.split(".", 1)[0]:
        return f"unsupported version {value[:20]!r} (this reader accepts 1.x)"
    return None


def check_schema_version(record: dict[str, Any], path: str | os.PathLike, line: int | None) -> dict[str, Any]:
    """Return ``record``; raise ``DataFormatError`` if it carries a ``schema_version`` not ``1.x``."""
    if "schema_version" in record:
        problem = schema_version_problem(record["schema_version"])
        if problem:
            raise DataFormatError(str(path), line, problem, field="schema_version")
    return record


class _NonFinite(ValueError):
    pass


def _refuse_constant(name: str) -> float:
    raise _NonFinite(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 parses to inf
        raise _NonFinite(text)
    return value


def depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects/arrays more than ``limit`` levels deep (iterative walk)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def loads_record(text: str, path: str | os.PathLike, line: int | None) -> Any:
    """Parse one JSON document strictly, raising ``DataFormatError`` (``path:line: field: problem``).

    Refused: invalid JSON, ``NaN`` / ``Infinity`` / overflowing numbers ("non-finite number"),
    and nesting deeper than ``MAX_JSON_DEPTH`` levels.
    """
    try:
        record = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _NonFinite as exc:
        raise DataFormatError(str(path), line, f"non-finite number ({exc})", field=_non_finite_in(text)) from None
    except json.JSONDecodeError as exc:
        raise DataFormatError(str(path), line, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise DataFormatError(str(path), line, f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:  # an integer past Python's digit limit (int_max_str_digits)
        raise DataFormatError(str(path), line, f"invalid JSON: {exc}") from None
    # the depth is at most the number of opening brackets, so most records skip the walk
    if text.count("{") + text.count("[") > MAX_JSON_DEPTH and depth_exceeds(record, MAX_JSON_DEPTH):
        raise DataFormatError(str(path), line, f"nested deeper than {MAX_JSON_DEPTH} levels")
    return record


def _non_finite_in(text: str) -> str | None:
    """Where the non-finite number is (parsed again leniently; only on the error path)."""
    try:
        return non_finite_field(json.loads(text))
    except (ValueError, RecursionError):
        return None


def non_finite_field(value: Any, where: str = "") -> str | None:
    """The dotted path of the first NaN/Infinity float inside ``value``, or None."""
    stack = [(value, where)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return at or "<record>"
        if isinstance(item, dict):
            stack.extend((v, f"{at}.{k}" if at else str(k)) for k, v in reversed(list(item.items())))
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{at}[{i}]") for i, v in reversed(list(enumerate(item))))
    return None


def finite_json(value: dict[str, Any]) -> dict[str, Any]:
    """A pydantic validator for free-form dicts (tool parameters, metadata): refuse NaN/Infinity
    inside them too; ``allow_inf_nan=False`` checks only typed float fields, and pydantic would
    dump the others as null (``model_dump_json``) or as invalid JSON."""
    where = non_finite_field(value)
    if where is not None:
        raise ValueError(f"non-finite number (NaN/Infinity) at {where}")
    return value


def dumps_record(record: Any, path: str | os.PathLike = "<output>", line: int | None = None) -> str:
    """One JSON line for ``record``; a NaN/Infinity anywhere raises ``DataFormatError``
    (``path:line: field: non-finite number ...``), so no writer emits JSON that readers refuse."""
    try:
        text = json.dumps(record, ensure_ascii=False, allow_nan=False)
    except ValueError:
        field = non_finite_field(record)
        if field is None:
            raise
        raise DataFormatError(
            str(path), line, "non-finite number (NaN/Infinity), refusing to write it", field=field
        ) from None
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate (a policy can emit "\ud800") has no UTF-8 form; as a \u escape
            # it is still valid JSON and reads back as the same string, so the record is kept.
            text = json.dumps(record, ensure_ascii=True, allow_nan=False)
    return text


def format_field_path(loc: tuple[Any, ...]) -> str:
    """Render a pydantic error location as ``steps[3].tool_call.name``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "<record>"


def validation_error(path: str | os.PathLike, line: int | None, err: ValidationError) -> DataFormatError:
    """Turn a pydantic ``ValidationError`` into a one-line ``DataFormatError`` (first problem)."""
    first = err.errors()[0]
    more = len(err.errors()) - 1
    message = first["msg"] + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else "")
    return DataFormatError(str(path), line, message, field=format_field_path(first["loc"]))


def iter_json_lines(
    path: str | os.PathLike,
    *,
    on_error: Callable[[DataFormatError], None] | None = None,
    max_line_bytes: int | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, record)`` for every non-blank line; each record must be an object.

    A bad line raises ``DataFormatError``; with ``on_error`` it is passed there instead and
    reading goes on with the next line (an unreadable file still raises). At most
    ``max_line_bytes`` (default: :func:`default_max_line_bytes`) of a line are held in memory.
    """
    path = Path(path)
    limit = default_max_line_bytes() if max_line_bytes is None else max_line_bytes
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the with below; open errors need their own message
    except OSError as exc:
        raise DataFormatError(str(path), None, os_problem(exc)) from None
    with handle:
        for number, raw in bounded_lines(handle, limit):
            if number == 1 and raw is not None and raw.startswith((b"\xff\xfe", b"\xfe\xff")):
                raise DataFormatError(str(path), 1, "the file is UTF-16 text; convert it to UTF-8")
            try:
                if raw is None:
                    raise DataFormatError(
                        str(path), number, f"line longer than {limit} bytes (limit: {MAX_LINE_BYTES_ENV})"
                    )
                if not raw.strip():
                    continue
                yield number, _record_of_line(raw, path, number)
            except DataFormatError as exc:
                if on_error is None:
                    raise
                on_error(exc)


def bounded_lines(handle: Any, limit: int) -> Iterator[tuple[int, bytes | None]]:
    """``(line number, raw bytes)`` of each line of a binary file; ``None`` for a line longer than
    ``limit`` bytes, whose rest is skipped in small chunks: no line costs more than ``limit``
    bytes of memory, however long it is."""
    number = 0
    while raw := handle.readline(limit + 1):  # the buffered reader fills it chunk by chunk
        number += 1
        if len(raw) <= limit or raw.endswith(b"\n"):
            yield number, raw
            continue
        while (rest := handle.readline(1 << 16)) and not rest.endswith(b"\n"):
            pass
        yield number, None


def _record_of_line(raw: bytes, path: Path, number: int) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataFormatError(
            str(path), number, f"not UTF-8 text (byte {exc.start}); is it a binary, Latin-1 or UTF-16 file?"
        ) from None
    if number == 1:
        text = text.removeprefix("\ufeff")  # a UTF-8 byte order mark
    record = loads_record(text, path, number)
    if not isinstance(record, dict):
        raise DataFormatError(str(path), number, f"expected a JSON object, got {type(record).__name__}")
    return check_schema_version(record, path, number)


def read_jsonl(
    path: str | os.PathLike,
    model: type[ModelT] | None = None,
    *,
    on_error: Callable[[DataFormatError], None] | None = None,
) -> Iterator[Any]:
    """Stream the records of a JSONL file, validated into ``model`` when given.

    With ``on_error``, a bad record (broken JSON, a field that breaks ``model``) is passed there
    and skipped instead of ending the read.
    """
    for number, record in iter_json_lines(path, on_error=on_error):
        if model is None:
            yield record
            continue
        try:
            yield model.model_validate(record)
        except ValidationError as err:
            if on_error is None:
                raise validation_error(path, number, err) from None
            on_error(validation_error(path, number, err))


def _to_jsonable(record: Any) -> Any:
    if isinstance(record, BaseModel):
        return record.model_dump(mode="json", exclude_none=False)
    return record


def write_jsonl(path: str | os.PathLike, records: Iterable[Any], *, append: bool = False) -> int:
    """Write records (dicts or pydantic models) atomically; return how many were written.

    With ``append=True`` the existing lines are kept and the new ones added after them, still
    through a temporary file, so readers never see a partial line.
    """
    path = Path(path)
    count = 0

    def fill(out) -> None:
        nonlocal count
        if append and path.exists():
            with open(path, encoding="utf-8") as existing:
                for line in existing:
                    out.write(line if line.endswith("\n") else line + "\n")
        for record in records:
            out.write(dumps_record(_to_jsonable(record), path, count + 1) + "\n")
            count += 1

    _replace_atomically(path, fill, text=True)
    return count


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename: all of it or nothing."""
    path = Path(path)
    _replace_atomically(path, lambda out: out.write(data), text=False)
    return path


def _replace_atomically(path: Path, fill: Any, *, text: bool) -> None:
    """Create a temp file beside ``path``, let ``fill(handle)`` write it, fsync, rename over ``path``
    (keeping an existing file's permissions). On any error the temp file is removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        mode = {"mode": "w", "encoding": "utf-8", "newline": "\n"} if text else {"mode": "wb"}
        with os.fdopen(fd, **mode) as out:
            fill(out)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp_name, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def read_trajectories(path: str | os.PathLike, *, on_error: Callable[[DataFormatError], None] | None = None):
    """Stream ``Trajectory`` records from a JSONL file (``on_error``: report bad records, skip them)."""
    from knowlyrcore.trajectory import Trajectory

    return read_jsonl(path, Trajectory, on_error=on_error)


def write_trajectories(path: str | os.PathLike, trajectories: Iterable[Any], *, append: bool = False) -> int:
    """Validate and write trajectories (models or dicts) atomically."""
    from knowlyrcore.trajectory import Trajectory

    def validated() -> Iterator[Trajectory]:
        for position, item in enumerate(trajectories):
            if isinstance(item, Trajectory):
                yield item
                continue
            try:
                yield Trajectory.model_validate(item)
            except ValidationError as err:
                raise validation_error(f"<trajectory #{position}>", None, err) from None

    return write_jsonl(path, validated(), append=append)
