"""What a learned process reward model reads: a trajectory up to a step, as one text.

``step_prefixes(trajectory)`` gives one text per step: the task's request and every step so far
(its thought, the tool call and what came back). The data a scorer is trained on
(``PRMRecord.text``) and what it scores later are rendered by this one function, so the two
cannot drift apart.

Only what an agent saw goes in: the task's ``description``, and each step's thought, call and
observation. Nothing that carries the answer does (the outcome, recorded rewards, the task's
metadata with its solution), so a scorer cannot learn to read the label.

A scorer reads a few hundred tokens, so the text is kept under ``max_chars``: the request's
head, each call and observation cut to a bounded length, and, when the steps still do not fit,
the newest steps kept and the older ones replaced by a line saying how many were left out (the
last steps decide whether a run is still on track).

Examples:
    >>> record = {"task": {"description": "Cancel order 12."},
    ...           "steps": [{"tool_call": {"name": "get_order", "parameters": {"order_id": 12}},
    ...                      "observation": {"output": "status: pending"}}]}
    >>> print(step_prefixes(record)[0])
    Task: Cancel order 12.
    Step 1: get_order {"order_id": 12}
    Result: status: pending
"""

from __future__ import annotations

import json
from typing import Any

#: the longest text a prefix is rendered to (about 500 tokens of a BERT or SmolLM2 vocabulary)
MAX_CHARS = 2000
#: how much of the request, a thought, a call's arguments and an observation a step keeps
TASK_CHARS, THOUGHT_CHARS, CALL_CHARS, OUTPUT_CHARS = 500, 200, 400, 400


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())  # one line: newlines separate steps
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _field(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else getattr(value, key, None)


def _as_record(trajectory: Any) -> dict[str, Any]:
    if isinstance(trajectory, dict):
        return trajectory
    if callable(getattr(trajectory, "model_dump", None)):  # a knowlyrcore.Trajectory
        return trajectory.model_dump(mode="json")
    raise TypeError(f"step_prefixes takes a trajectory record or a Trajectory, got {type(trajectory).__name__}")


def step_line(number: int, step: dict[str, Any]) -> str:
    """One step as the scorer reads it: thought, call and result."""
    call = step.get("tool_call") or {}
    observation = step.get("observation") or {}
    arguments = json.dumps(call.get("parameters") or {}, ensure_ascii=False, sort_keys=True)
    lines = []
    if step.get("thought"):
        lines.append(f"Thought: {_cut(str(step['thought']), THOUGHT_CHARS)}")
    lines.append(f"Step {number}: {call.get('name', '?')} {_cut(arguments, CALL_CHARS)}")
    output = _cut(str(_field(observation, "output") or ""), OUTPUT_CHARS)
    error = _field(observation, "error")
    lines.append(f"Result: {output}" + (f" [error: {_cut(str(error), OUTPUT_CHARS)}]" if error else ""))
    return "\n".join(lines)


def step_prefixes(trajectory: Any, *, max_chars: int = MAX_CHARS) -> list[str]:
    """One text per step of ``trajectory`` (a record dict or a ``Trajectory``): the request and
    the steps up to and including that one, at most ``max_chars`` long."""
    record = _as_record(trajectory)
    task = record.get("task") or {}
    header = f"Task: {_cut(str(_field(task, 'description') or ''), TASK_CHARS)}"
    lines = [step_line(i + 1, step) for i, step in enumerate(record.get("steps") or [])]
    texts = []
    for end in range(1, len(lines) + 1):
        kept: list[str] = []
        budget = max_chars - len(header) - 40  # room for the line that counts what was left out
        for line in reversed(lines[:end]):
            if kept and len(line) + 1 > budget:
                break
            kept.append(line)
            budget -= len(line) + 1
        left_out = end - len(kept)
        middle = [f"[{left_out} earlier step{'s' if left_out > 1 else ''} left out]"] if left_out else []
        texts.append("\n".join([header, *middle, *reversed(kept)])[:max_chars])
    return texts
