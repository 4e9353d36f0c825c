"""Data-backed tools built from a task: knowledge-base search, record lookup, document search.

A conversation task can carry its world in ``metadata``: ``knowledge_base`` (entries to search),
``records`` (rows to look up with ``query_stats``) and ``documents`` (a corpus for
``web_search`` when no real search tool is injected). Ranking is a plain term-overlap score:
deterministic, dependency-free and good enough for the small corpora tasks carry.
"""

from __future__ import annotations

import json
import re
from typing import Any

from knowlyrcore.models import ToolResult

_WORD = re.compile(r"\w+", re.UNICODE)


def _terms(text: str) -> list[str]:
    # CJK text has no spaces: treat each character as a term so Chinese queries still match.
    terms: list[str] = []
    for word in _WORD.findall(text.lower()):
        terms.extend(list(word) if re.search(r"[\u4e00-\u9fff]", word) else [word])
    return terms


def _entry_text(entry: Any) -> tuple[str, str]:
    if isinstance(entry, dict):
        title = str(entry.get("title") or entry.get("id") or entry.get("name") or "")
        body = str(
            entry.get("content") or entry.get("text") or entry.get("body") or json.dumps(entry, ensure_ascii=False)
        )
        return title, body
    return "", str(entry)


def search_entries(entries: list[Any], query: str, top_k: int = 3) -> ToolResult:
    """The ``top_k`` entries sharing the most terms with ``query``, best first."""
    wanted = set(_terms(query))
    if not wanted:
        return ToolResult(error="the query has no searchable words")
    scored = []
    for position, entry in enumerate(entries):
        title, body = _entry_text(entry)
        terms = _terms(f"{title} {body}")
        score = sum(1 for t in terms if t in wanted) + 2 * sum(1 for t in set(_terms(title)) if t in wanted)
        if score:
            scored.append((-score, position, title, body))
    if not scored:
        return ToolResult(output="no results", metadata={"results": 0})
    scored.sort()
    lines = [f"[{i}] {title + ': ' if title else ''}{body}" for i, (_, _, title, body) in enumerate(scored[:top_k], 1)]
    return ToolResult(output="\n".join(lines), metadata={"results": min(top_k, len(scored))})


def query_records(records: list[dict[str, Any]], query: str, filters: dict[str, Any] | None = None) -> ToolResult:
    """Records whose fields equal ``filters`` and whose values contain every word of ``query``."""
    wanted = _terms(query)
    matches = []
    for record in records:
        if filters and any(str(record.get(k)) != str(v) for k, v in filters.items()):
            continue
        haystack = set(_terms(" ".join(f"{k} {v}" for k, v in record.items())))
        if all(term in haystack for term in wanted):
            matches.append(record)
    if not matches:
        return ToolResult(output="no matching records", metadata={"matches": 0})
    shown = matches[:20]
    output = "\n".join(json.dumps(r, ensure_ascii=False, sort_keys=True) for r in shown)
    if len(matches) > len(shown):
        output += f"\n... {len(matches) - len(shown)} more"
    return ToolResult(output=output, metadata={"matches": len(matches)})
