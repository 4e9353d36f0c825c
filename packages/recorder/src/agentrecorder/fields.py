"""Typed access to parsed JSON with the JSON path of every value, for precise errors.

Adapters read untrusted logs; instead of ``data["history"][3]["content"]`` (a ``KeyError``
with no context) they call ``get(data, "history", where, list)`` and a wrong type or missing
key becomes a ``FieldError`` naming ``$.history[3].content`` and what was expected.

Example:
    >>> get({"a": [1]}, "a", "$", list)
    [1]
    >>> get({"a": 1}, "a", "$", str)
    Traceback (most recent call last):
    ...
    agentrecorder.errors.FieldError: $.a: expected a string, got an integer (1)
"""

from __future__ import annotations

import json
from typing import Any

from agentrecorder.errors import FieldError

_MISSING = object()

_TYPE_NAMES = {
    dict: "an object",
    list: "a list",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def type_name(value: Any) -> str:
    """JSON-ish name of a Python value's type, with an article."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _describe(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, (dict, list)) else ""
    return f"{type_name(value)} ({text[:40]})" if text else type_name(value)


def path(where: str, key: str | int) -> str:
    """Extend a JSON path: ``path("$", "a")`` is ``$.a``, ``path("$.a", 0)`` is ``$.a[0]``."""
    return f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}"


def expect(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    """Return ``value`` if it is of ``kind`` (bools are not numbers) else raise ``FieldError``."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok:
        wanted = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        raise FieldError(where, f"expected {wanted}, got {_describe(value)}")
    return value


def get(obj: dict, key: str, where: str, kind: type | tuple[type, ...] | None = None, default: Any = _MISSING) -> Any:
    """``obj[key]`` checked against ``kind``; missing keys return ``default`` or raise.

    A present ``null`` counts as missing when a default is given.
    """
    value = obj.get(key, _MISSING)
    if value is _MISSING or (value is None and default is not _MISSING):
        if default is _MISSING:
            raise FieldError(path(where, key), "missing required field")
        return default
    return expect(value, kind, path(where, key)) if kind is not None else value


def text_of(content: Any, where: str) -> str:
    """Message content as text: a string, null, or a list of ``{"type": "text", "text": ...}`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict):
                parts.append(json.dumps(part, ensure_ascii=False))
            else:
                raise FieldError(path(where, i), f"expected a content part object, got {_describe(part)}")
        return "\n".join(parts)
    raise FieldError(where, f"expected a string or a list of content parts, got {_describe(content)}")


def parse_arguments(raw: Any, where: str) -> dict[str, Any]:
    """Tool-call arguments as a dict: OpenAI sends a JSON string, others an object already."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise FieldError(where, f"arguments are not valid JSON: {exc.msg} (char {exc.pos})") from None
        if isinstance(parsed, dict):
            return parsed
        return {"value": parsed}
    raise FieldError(where, f"expected a JSON object or a JSON string, got {_describe(raw)}")
