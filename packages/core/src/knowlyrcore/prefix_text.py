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

``parse_prefix(text)`` reads such a text back into the request and its steps (name, arguments,
result, whether the result is an error): what ``agentreward.signals`` computes its process
signals from, so the signals a scorer is trained on and the ones it scores with come from the
same text.

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
import re
from dataclasses import dataclass
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
    exit_code = _field(observation, "exit_code")
    status = f" [exit {exit_code}]" if isinstance(exit_code, int) and exit_code != 0 else ""
    lines.append(f"Result: {output}" + (f" [error: {_cut(str(error), OUTPUT_CHARS)}]" if error else "") + status)
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


_STEP = re.compile(r"Step (\d+): (\S+) ?(.*)")
#: how a rendered result says the call failed: an ``error`` field or a non-zero exit code as
#: ``step_line`` appends them, or an environment's own ``[error]`` / ``Error:`` / traceback text
_ERROR = re.compile(r"\[error[:\]]|\[exit -?\d+\]$|^(error|exception)\b|traceback \(most recent call last\)", re.I)


@dataclass(frozen=True)
class PrefixStep:
    """One step of a rendered prefix: the call's tool name and arguments (JSON text, possibly cut
    short), what came back, and whether that was an error."""

    number: int
    name: str
    arguments: str
    result: str = ""
    error: bool = False


def parse_prefix(text: str) -> tuple[str, list[PrefixStep]]:
    """The request and the steps of a text ``step_prefixes`` rendered (steps left out of a long
    prefix are not in it). Lines it does not recognise (a thought) are skipped."""
    lines = text.split("\n")
    request = lines[0].removeprefix("Task: ") if lines and lines[0].startswith("Task: ") else ""
    steps: list[PrefixStep] = []
    for line in lines[1:]:
        if match := _STEP.fullmatch(line):
            steps.append(PrefixStep(int(match.group(1)), match.group(2), match.group(3)))
        elif line.startswith("Result: ") and steps:
            result = line.removeprefix("Result: ")
            last = steps[-1]
            steps[-1] = PrefixStep(last.number, last.name, last.arguments, result, bool(_ERROR.search(result)))
    return request, steps
