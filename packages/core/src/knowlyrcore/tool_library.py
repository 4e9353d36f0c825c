"""``ToolLibrary``: thousands of tool specs and a BM25 index to pick the few a step needs.

An agent cannot be shown a thousand tool schemas in every prompt. The library holds them and
``search(query, k)`` returns the ``k`` most relevant by Okapi BM25 over each tool's name (split
at ``_``, ``.``, ``-`` and camelCase, counted twice: the name is the densest description),
description and parameter names and descriptions. Pure Python, no dependencies, so it works
in torch-free installs; dense retrieval with an embedding model lives in knowlyr-trainer.

Libraries load from
- JSONL: one tool per line, either a spec (``{"name", "description", "parameters"}``) or an
  OpenAI tool (``{"type": "function", "function": {...}}``);
- JSON: an OpenAI ``tools`` array, a list of specs, or an MCP ``tools/list`` result
  (``{"tools": [{"name", "description", "inputSchema"}]}``).
A malformed file is one ``DataFormatError`` naming the file, the line or tool, and the field.

Examples:
    >>> library = ToolLibrary([ToolSpec(name="get_weather", description="Current weather for a city"),
    ...                        ToolSpec(name="book_flight", description="Book a flight between two airports"),
    ...                        ToolSpec(name="cancel_order", description="Cancel a pending order")])
    >>> [tool.name for tool, _ in library.search("what's the weather in Paris", k=1)]
    ['get_weather']
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from knowlyrcore.domain import ToolSpec
from knowlyrcore.errors import DataFormatError, InputError, os_problem
from knowlyrcore.jsonl import default_max_line_bytes, iter_json_lines, loads_record, validation_error

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
# words that say nothing about which tool is meant
_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "to",
        "for",
        "in",
        "on",
        "at",
        "by",
        "with",
        "and",
        "or",
        "is",
        "are",
        "be",
        "this",
        "that",
        "it",
        "its",
        "from",
        "as",
        "your",
        "my",
        "me",
        "i",
        "you",
        "please",
        "can",
        "could",
        "would",
        "should",
        "do",
        "does",
        "what",
        "which",
        "who",
        "how",
    ]
)


def tokenize(text: str) -> list[str]:
    """Lower-case word pieces: ``getUserDetails`` and ``get_user_details`` both give get, user, details."""
    return [w for w in (m.lower() for m in _WORD.findall(text)) if w not in _STOP]


def tool_text(tool: ToolSpec) -> list[str]:
    """The tokens a tool is indexed under: name twice, description, parameter names and descriptions."""
    name = tokenize(tool.name)
    parts = [*name, *name, *tokenize(tool.description)]
    for param, schema in (tool.parameters.get("properties") or {}).items():
        parts += tokenize(str(param))
        if isinstance(schema, dict):
            parts += tokenize(str(schema.get("description", "")))
    return parts


class ToolLibrary:
    """Tool specs by name, with a BM25 index built on first search."""

    def __init__(self, tools: Iterable[ToolSpec], *, k1: float = 1.2, b: float = 0.75):
        self.tools: list[ToolSpec] = []
        self._by_name: dict[str, int] = {}
        for tool in tools:
            if tool.name in self._by_name:
                raise InputError(f"tool {tool.name!r} is in the library twice")
            self._by_name[tool.name] = len(self.tools)
            self.tools.append(tool)
        if not self.tools:
            raise InputError("the tool library is empty: nothing to search")
        self.k1, self.b = k1, b
        self._postings: dict[str, list[tuple[int, int]]] | None = None

    def __len__(self) -> int:
        return len(self.tools)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self.tools)

    def get(self, name: str) -> ToolSpec:
        if name not in self._by_name:
            raise KeyError(f"no tool {name!r} in the library")
        return self.tools[self._by_name[name]]

    # --- BM25 ----------------------------------------------------------------------------------

    def _build(self) -> dict[str, list[tuple[int, int]]]:
        postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        lengths = []
        for doc, tool in enumerate(self.tools):
            counts = Counter(tool_text(tool))
            lengths.append(sum(counts.values()))
            for term, tf in counts.items():
                postings[term].append((doc, tf))
        average = sum(lengths) / len(lengths) or 1.0
        # per document, the BM25 length normaliser k1 * (1 - b + b * dl / avgdl), computed once
        self._norm = [self.k1 * (1 - self.b + self.b * n / average) for n in lengths]
        n_docs = len(self.tools)
        self._idf = {t: math.log(1 + (n_docs - len(p) + 0.5) / (len(p) + 0.5)) for t, p in postings.items()}
        self._postings = dict(postings)
        return self._postings

    def search(self, query: str, k: int = 5) -> list[tuple[ToolSpec, float]]:
        """The ``k`` tools that best match ``query``, best first, with their BM25 scores (ties by
        library order). Tools sharing no word with the query are not returned."""
        if k < 1:
            raise InputError(f"k must be >= 1, got {k}")
        postings = self._postings if self._postings is not None else self._build()
        scores: dict[int, float] = defaultdict(float)
        for term, weight in Counter(tokenize(query)).items():
            idf = self._idf.get(term)
            if idf is None:
                continue
            for doc, tf in postings[term]:
                scores[doc] += weight * idf * tf * (self.k1 + 1) / (tf + self._norm[doc])
        best = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:k]
        return [(self.tools[doc], score) for doc, score in best]

    # --- loading -------------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike) -> ToolLibrary:
        """Read a library from JSONL or JSON (see the module docstring for the shapes)."""
        path = Path(path)
        if path.suffix.lower() == ".jsonl":
            tools = [_spec_of(record, path, number, None) for number, record in iter_json_lines(path)]
            if not tools:
                raise DataFormatError(str(path), None, "no tools (empty file)")
            return cls(tools)
        document = _read_document(path)
        if isinstance(document, dict) and isinstance(document.get("tools"), list):
            document = document["tools"]  # an MCP tools/list result
        if not isinstance(document, list):
            raise DataFormatError(str(path), None, "expected a list of tools, or an object with a 'tools' list")
        if not document:
            raise DataFormatError(str(path), None, "no tools (empty list)")
        return cls(_spec_of(item, path, None, i) for i, item in enumerate(document))

    @classmethod
    def merge(cls, *libraries: ToolLibrary) -> ToolLibrary:
        """One library of every tool of ``libraries`` (names must stay unique)."""
        return cls(tool for library in libraries for tool in library)


def tools_in_data(path: str | os.PathLike) -> list[ToolSpec]:
    """Every tool a data file of agent runs mentions (JSON or JSONL): the specs in its OpenAI /
    MCP ``tools`` arrays, then — with a description made from the name — the tools its
    ``tool_calls`` call that no array describes. First occurrence wins; entries that are not
    valid specs are skipped (a data set is harvested, not validated)."""
    path = Path(path)
    if path.suffix.lower() == ".jsonl":
        documents: Iterable[Any] = (record for _, record in iter_json_lines(path))
    else:
        documents = [_read_document(path)]
    found: dict[str, ToolSpec] = {}
    called: dict[str, None] = {}
    for document in documents:
        stack = [document]
        while stack:
            item = stack.pop()
            if isinstance(item, list):
                stack.extend(reversed(item))
                continue
            if not isinstance(item, dict):
                continue
            tools = item.get("tools")
            if isinstance(tools, list):
                for entry in tools:
                    try:
                        tool = _spec_of(_without_nulls(entry), path, None, None)
                    except DataFormatError:
                        continue
                    found.setdefault(tool.name, tool)
            for call in item.get("tool_calls") or [] if isinstance(item.get("tool_calls"), list) else []:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and isinstance(function.get("name"), str) and function["name"]:
                    called.setdefault(function["name"], None)
            stack.extend(v for k, v in item.items() if k != "tools" and isinstance(v, (dict, list)))
    for name in called:
        if name not in found:
            words = " ".join(tokenize(name)) or name
            found[name] = ToolSpec(
                name=name, description=f"{words[:1].upper()}{words[1:]} (seen called in {path.name})."
            )
    return list(found.values())


def _without_nulls(value: Any) -> Any:
    """``value`` without ``null`` members: data sets stored as Arrow tables pad every tool's schema
    with the union of all tools' keys, set to null (``"enum": null``, ``"path": null``)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _read_document(path: Path) -> Any:
    limit = default_max_line_bytes()
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise DataFormatError(str(path), None, os_problem(exc)) from None
    if len(data) > limit:
        raise DataFormatError(str(path), None, f"larger than {limit} bytes")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DataFormatError(str(path), 1, "the file is UTF-16 text; convert it to UTF-8")
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise DataFormatError(str(path), None, f"not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise DataFormatError(str(path), None, "empty file: no tools")
    return loads_record(text, path, None)


def _spec_of(item: Any, path: Path, line: int | None, index: int | None) -> ToolSpec:
    """A ``ToolSpec`` from a spec, an OpenAI tool or an MCP tool listing entry."""
    where = f"tools[{index}]" if index is not None else None
    if not isinstance(item, dict):
        raise DataFormatError(str(path), line, f"expected a tool object, got {type(item).__name__}", field=where)
    if item.get("type") == "function" and isinstance(item.get("function"), dict):
        item = item["function"]  # OpenAI: {"type": "function", "function": {name, description, parameters}}
    fields = {"name": item.get("name"), "description": item.get("description") or ""}
    schema = item.get("parameters", item.get("inputSchema"))  # MCP calls it inputSchema
    if schema is not None:
        fields["parameters"] = schema
    try:
        return ToolSpec.model_validate(fields)
    except ValidationError as exc:
        error = validation_error(path, line, exc)
        field = f"{where}.{error.field}" if where and error.field else where or error.field
        raise DataFormatError(str(path), line, error.problem, field=field) from None
