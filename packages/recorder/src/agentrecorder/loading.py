"""Read a log file into JSON records, with one-line errors for every way a file can be bad.

Two layouts exist in the wild: one JSON document per file (``.json``, ``.traj``: a dict or a
list) and JSONL (one record per line, e.g. OpenHands' evaluation ``output.jsonl``). JSONL is
streamed line by line so a file of any size costs the memory of its longest record; a JSON
document has to be parsed whole (``json.loads``; a 50 MB log takes about a second and a few
hundred MB).

Before parsing, the first block is sniffed: a UTF-16 byte order mark names the encoding, and
NUL bytes mean binary data (an image, a tarball, a pickle); both get their own error instead of
a confusing JSON one. A JSONL line longer than core's ``KNOWLYR_MAX_LINE_BYTES`` (16 MiB unless
set) is refused after reading that many bytes, and ``NaN`` / ``Infinity`` anywhere in a log are
refused naming their JSON path (no trajectory may carry them, and a field the adapter drops
must not hide them).

A data set published as one JSON array of rows (a Hugging Face export, an ADP ``*.std.json``)
can be far bigger than memory: ``iter_array`` parses it incrementally (``ijson``), one row at a
time, refusing a row nested deeper than core's ``MAX_JSON_DEPTH`` before it is built.

Example:
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> _ = p.write_text('{"a": 1}\\n{"a": 2}\\n')
    >>> [(line, rec["a"]) for line, rec in load_records(p)]
    [(1, 1), (2, 2)]
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from agentrecorder.errors import ConversionError
from knowlyrcore.jsonl import (
    MAX_JSON_DEPTH,
    MAX_LINE_BYTES_ENV,
    bounded_lines,
    default_max_line_bytes,
    non_finite_field,
)

SNIFF_BYTES = 8192
JSONL_SUFFIXES = (".jsonl", ".ndjson")


def sniff(path: Path) -> bytes:
    try:
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except IsADirectoryError:
        raise ConversionError(str(path), None, "is a directory, not a log file") from None
    except OSError as exc:
        raise ConversionError(str(path), None, exc.strerror or str(exc)) from None
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ConversionError(str(path), None, "the file is UTF-16 text; convert it to UTF-8")
    nul = head.find(b"\x00")
    if nul >= 0:
        raise ConversionError(str(path), None, f"binary data, not a JSON log (NUL byte at offset {nul})")
    if not head.strip():
        raise ConversionError(str(path), None, "empty file, no records")
    return head


def _decode(raw: bytes, path: Path, line: int | None = None) -> str:
    try:
        return raw.decode("utf-8-sig") if line in (None, 1) else raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if line is None:
            line = raw.count(b"\n", 0, exc.start) + 1
        raise ConversionError(
            str(path), line, f"not UTF-8 text (byte offset {exc.start}); binary or another encoding"
        ) from None


def _json_error(path: Path, exc: json.JSONDecodeError, line_offset: int = 0) -> ConversionError:
    at_end = exc.pos >= len(exc.doc.rstrip()) or exc.msg.startswith("Unterminated string")
    problem = "truncated JSON, the file ends early" if at_end else "invalid JSON"
    return ConversionError(
        str(path), exc.lineno + line_offset, f"{problem}: {exc.msg} (column {exc.colno}, char {exc.pos})"
    )


class _NonFinite(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NonFinite(name)


def _parse(text: str, path: Path, line: int | None, line_offset: int = 0) -> Any:
    """``json.loads`` with the recorder's one-line errors; NaN/Infinity are refused at their JSON path."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except _NonFinite as exc:
        try:  # parsed again leniently, only to name the field
            field = non_finite_field(json.loads(text), "$")
        except (ValueError, RecursionError):
            field = None
        raise ConversionError(str(path), line, f"non-finite number ({exc})", field=field) from None
    except json.JSONDecodeError as exc:
        raise _json_error(path, exc, line_offset) from None
    except RecursionError:
        raise ConversionError(str(path), line, "JSON nested too deeply to read") from None


def iter_jsonl(path: Path, on_error: Callable[[ConversionError], None] | None = None) -> Iterator[tuple[int, Any]]:
    """(line, record) of each non-blank line; with ``on_error`` a bad line is reported and skipped."""
    limit = default_max_line_bytes()
    with open(path, "rb") as handle:
        for number, raw in bounded_lines(handle, limit):
            try:
                if raw is None:
                    raise ConversionError(str(path), number, f"line longer than {limit} bytes ({MAX_LINE_BYTES_ENV})")
                if not raw.strip():
                    continue
                record = _parse(_decode(raw, path, number).rstrip("\r\n"), path, number, line_offset=number - 1)
            except ConversionError as exc:
                if on_error is None:
                    raise
                on_error(exc)
                continue
            yield number, record


def looks_like_jsonl(path: Path, head: bytes) -> bool:
    if path.suffix.lower() in JSONL_SUFFIXES:
        return True
    first, _, rest = head.lstrip().partition(b"\n")
    if not rest.strip() or not first.rstrip().endswith(b"}"):
        return False
    try:
        json.loads(first)
    except ValueError:
        return False
    return rest.lstrip()[:1] == b"{"


def load_records(path: str | os.PathLike) -> Iterator[tuple[int | None, Any]]:
    """Yield ``(line, record)``: one ``(None, document)`` for a JSON file, one per line for JSONL.

    Raises ``ConversionError`` (file, line, column) for binary data, UTF-16 and other non-UTF-8
    text, empty files, overlong JSONL lines, broken or truncated JSON and non-finite numbers.
    """
    path = Path(path)
    head = sniff(path)
    if looks_like_jsonl(path, head):
        yield from iter_jsonl(path)
        return
    yield None, _parse(_decode(path.read_bytes(), path), path, None)


def starts_an_array(head: bytes) -> bool:
    """Whether a file whose first block is ``head`` holds one top-level JSON array."""
    return head.removeprefix(b"\xef\xbb\xbf").lstrip()[:1] == b"["


def _array_error(path: Path, index: int, exc: Exception) -> ConversionError:
    text = str(exc)
    if "premature EOF" in text:
        problem = "truncated JSON, the file ends early"
    elif "invalid bytes in UTF8" in text or isinstance(exc, UnicodeDecodeError):
        problem = "not UTF-8 text; binary or another encoding"
    else:
        problem = "invalid JSON: " + text.removeprefix("b'").splitlines()[0].split("\\n")[0].strip()
    return ConversionError(str(path), None, problem, field=f"$[{index}]")


def iter_array(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """Yield ``(index, row)`` for each element of the top-level JSON array in ``path``.

    The file is parsed incrementally, so memory holds one row at a time. Raises
    ``ConversionError`` naming the row (``$[index]``) for broken or truncated JSON, non-UTF-8
    text, NaN/Infinity or overflowing numbers, and rows nested deeper than ``MAX_JSON_DEPTH``.
    """
    import ijson

    path = Path(path)
    index = 0
    with open(path, "rb") as handle:
        if handle.read(3) != b"\xef\xbb\xbf":
            handle.seek(0)
        events = ijson.basic_parse(handle, use_float=True)
        stack: list[Any] = []  # the containers of the row being built, outermost first
        keys: list[Any] = []  # the pending key of each open object
        try:
            if next(events, (None, None))[0] != "start_array":
                raise ConversionError(str(path), None, "not a JSON array")
            for event, value in events:
                if event == "map_key":
                    keys[-1] = value
                    continue
                if event in ("start_map", "start_array"):
                    if len(stack) >= MAX_JSON_DEPTH:
                        raise ConversionError(
                            str(path), None, f"nested deeper than {MAX_JSON_DEPTH} levels", field=f"$[{index}]"
                        )
                    stack.append({} if event == "start_map" else [])
                    keys.append(None)
                    continue
                if event in ("end_map", "end_array"):
                    if not stack:  # the end of the top-level array
                        continue
                    keys.pop()
                    value = stack.pop()
                if not stack:
                    yield index, value
                    index += 1
                elif isinstance(stack[-1], list):
                    stack[-1].append(value)
                else:
                    stack[-1][keys[-1]] = value
        except (ijson.JSONError, UnicodeDecodeError) as exc:
            raise _array_error(path, index, exc) from None
