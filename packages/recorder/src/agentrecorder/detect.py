"""``--format auto``: find the adapter whose ``check`` accepts a record, and say why.

Adapters are asked in priority order (specific formats such as Who&When before generic ones
such as OpenAI chat); the first that accepts wins. When none does, ``UnknownFormatError``
lists every format tried with the reason it gave.

Example:
    >>> detect({"trajectory": [{"action": "ls", "observation": ""}]}, "x.traj").adapter.name
    'swe-agent'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentrecorder.adapters.base import Adapter
from agentrecorder.errors import UnknownFormatError
from agentrecorder.registry import adapters


@dataclass(frozen=True)
class Detection:
    """The chosen adapter and the formats that were ruled out before it (name → reason)."""

    adapter: Adapter
    ruled_out: dict[str, str]

    def describe(self) -> str:
        skipped = f" (ruled out: {', '.join(self.ruled_out)})" if self.ruled_out else ""
        return f"detected format {self.adapter.name}{skipped}"


def detect(record: Any, path: str = "<input>", line: int | None = None) -> Detection:
    """The first adapter (by priority) that accepts ``record``; else ``UnknownFormatError``."""
    reasons: dict[str, str] = {}
    for adapter in adapters():
        why = adapter.check(record)
        if why is None:
            return Detection(adapter, reasons)
        reasons[adapter.name] = why
    raise UnknownFormatError(path, line, reasons)
