"""Parse tool calls out of generated text in the chat template's ``<tool_call>`` format.

The template (``chat_template.py``) teaches the model to answer a tool request with
``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` blocks. The parser for them is
shared with every other knowlyr policy and lives in ``knowlyrcore.tool_parsing`` (an incremental
state machine: ``ToolCallParser``); this module keeps the trainer's names for it. ``ToolCall`` is
``knowlyrcore.FunctionCall``: a name, JSON-object arguments, and ``error`` when the arguments
were unusable (they are then ``{}``). A block whose JSON does not parse stays in the content; an
unclosed last block is accepted because generation may stop at ``<|im_end|>`` before the tag.

Example:
    >>> parse_tool_calls('Let me look.\\n<tool_call>\\n{"name": "ls", "arguments": {"path": "."}}\\n</tool_call>')
    ('Let me look.', [FunctionCall(name='ls', arguments={'path': '.'}, error=None, id=None)])
"""

from __future__ import annotations

from knowlyrcore.tool_parsing import FunctionCall as ToolCall
from knowlyrcore.tool_parsing import (
    ToolCallParser,
    call_from_json,
    first_json_object,
    parse_tool_calls,
    possible_tool_call_start,
)

__all__ = [
    "ToolCall",
    "ToolCallParser",
    "call_from_json",
    "first_json_object",
    "parse_tool_calls",
    "possible_tool_call_start",
]
