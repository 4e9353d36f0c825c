"""The adapter protocol: recognise one framework's log and map it onto the trajectory schema.

An adapter is a class with a ``name`` (the ``--format`` value), a one-line ``description``,
a ``priority`` (auto-detection tries lower numbers first, so specific formats come before
generic ones), ``check(record)`` (``None`` when the record looks like this format, otherwise
the reason it does not) and ``convert(record, source=...)`` yielding ``Trajectory`` objects
(one log file may hold several episodes, e.g. a tau-bench results list). Formats whose records
are JSON objects subclass ``ObjectAdapter`` and write ``check_object`` instead of ``check``.

Adapters read values through ``agentrecorder.fields`` so a bad value raises ``FieldError``
with its JSON path; the converter adds the file and line.

Steps are built with ``StepList``, which numbers them and keeps the schema's invariants.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any, ClassVar

from typing_extensions import Unpack

from knowlyrcore.recording import StepFields, make_step
from knowlyrcore.trajectory import Observation, Step, Trajectory

#: tool name given to a plain text turn (a reply to the user or to other agents)
RESPOND = "respond"


class Adapter:
    """Base class of every adapter (subclass it and register it under an entry point)."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    priority: ClassVar[int] = 100

    def check(self, record: Any) -> str | None:
        """``None`` if ``record`` is in this format, else a short reason why not."""
        raise NotImplementedError

    def convert(self, record: Any, *, source: str) -> Iterator[Trajectory]:
        """Yield the trajectories in ``record`` (``source`` is ``"<format>:<file>"``)."""
        raise NotImplementedError


class ObjectAdapter(Adapter):
    """An adapter whose records are JSON objects: ``check`` refuses anything else with
    ``not_an_object`` and asks ``check_object`` about the rest."""

    #: why a record that is not a JSON object is not in this format
    not_an_object: ClassVar[str] = "not a JSON object"

    def check(self, record: Any) -> str | None:
        if not isinstance(record, dict):
            return self.not_an_object
        return self.check_object(record)

    def check_object(self, record: dict[str, Any]) -> str | None:
        """``None`` if the JSON object ``record`` is in this format, else a short reason why not."""
        raise NotImplementedError


class StepList:
    """Collects steps, numbering them 0, 1, 2... as the schema requires."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    def add(
        self, tool: str, parameters: dict[str, Any] | None = None, output: str = "", **fields: Unpack[StepFields]
    ) -> Step:
        step = make_step(len(self.steps), tool, parameters, output, **fields)
        self.steps.append(step)
        return step

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def last(self) -> Step | None:
        return self.steps[-1] if self.steps else None

    def set_observation(self, step: Step, output: str, **fields: Any) -> None:
        """Attach (or extend) the observation of an already added step."""
        current = step.observation
        text = output if not current.output else f"{current.output}\n{output}"
        step.observation = Observation(
            output=text,
            exit_code=fields.get("exit_code", current.exit_code),
            error=fields.get("error", current.error),
        )


def iso_timestamp(value: Any) -> float | None:
    """Unix time of an ISO-8601 string (naive times are taken as UTC), or ``None``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        from datetime import timezone

        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


_FENCE = re.compile(r"```([\w.+-]*)[ \t]*\n(.*?)\n?```", re.DOTALL)


def code_blocks(text: str) -> list[tuple[str, str, int, int]]:
    """Fenced code blocks in ``text`` as ``(language, code, start, end)`` (fence offsets)."""
    return [(m.group(1), m.group(2), m.start(), m.end()) for m in _FENCE.finditer(text)]


def strip_blocks(text: str, blocks: list[tuple[str, str, int, int]]) -> str:
    """``text`` without the given code blocks: the prose around them (the agent's thought)."""
    out, cursor = [], 0
    for _, _, start, end in blocks:
        out.append(text[cursor:start])
        cursor = end
    out.append(text[cursor:])
    return "\n".join(part.strip() for part in out if part.strip())
