"""Parse tool calls out of generated text in the chat template's ``<tool_call>`` format.

The template (``chat_template.py``) teaches the model to answer a tool request with
``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` blocks. This module is the other
half: it splits generated text into the free-text content and the list of calls. A block whose
JSON does not parse stays in the content (the caller sees what the model wrote, nothing is lost);
an unclosed last block is accepted because generation may stop at ``<|im_end|>`` before the tag.

Example:
    >>> parse_tool_calls('Let me look.\\n<tool_call>\\n{"name": "ls", "arguments": {"path": "."}}\\n</tool_call>')
    ('Let me look.', [ToolCall(name='ls', arguments={'path': '.'})])
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agenttrainer.models.chat_template import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

_BLOCK_RE = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)(?:" + re.escape(TOOL_CALL_CLOSE) + r"|\Z)", re.DOTALL)


@dataclass
class ToolCall:
    """One function call: its name and JSON-object arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


def first_json_object(text: str) -> tuple[dict[str, Any], int, int] | None:
    """The first JSON object in ``text`` as ``(object, start, end)``, or None if there is none."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            return value, start, end
        start = text.find("{", end)
    return None


def call_from_json(obj: dict[str, Any]) -> ToolCall | None:
    """A ``ToolCall`` from the object shapes models and datasets use for a call, else None.

    Accepts ``{"name", "arguments"}`` (OpenAI/Hermes; arguments may be a JSON string),
    ``{"name", "parameters"}`` (knowlyr trajectories), ``{"tool", "params"}`` (knowlyr actions) and
    ``{"function": {...}}`` (an OpenAI ``tool_calls`` entry).
    """
    if isinstance(obj.get("function"), dict):
        obj = obj["function"]
    name = obj.get("name", obj.get("tool"))
    if not isinstance(name, str) or not name.strip():
        return None
    arguments = next((obj[k] for k in ("arguments", "parameters", "params") if k in obj), {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None
    return ToolCall(name=name.strip(), arguments=arguments)


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """Split ``text`` into ``(content, calls)``; content is the text outside parsed blocks, stripped."""
    calls: list[ToolCall] = []
    kept: list[str] = []
    position = 0
    for match in _BLOCK_RE.finditer(text):
        found = first_json_object(match.group(1))
        call = call_from_json(found[0]) if found else None
        if call is None:
            continue  # not a well-formed call: leave the block in the content
        calls.append(call)
        kept.append(text[position : match.start()])
        position = match.end()
    kept.append(text[position:])
    return "".join(kept).strip(), calls


def possible_tool_call_start(text: str) -> int:
    """Index from which ``text`` could be (the start of) a tool-call block, else ``len(text)``.

    A streaming server emits text only up to this index, so a ``<tool_call>`` split over several
    tokens is never half-sent as content.
    """
    full = text.find(TOOL_CALL_OPEN)
    if full != -1:
        return full
    for size in range(min(len(TOOL_CALL_OPEN) - 1, len(text)), 0, -1):
        if TOOL_CALL_OPEN.startswith(text[-size:]):
            return len(text) - size
    return len(text)
