"""Model output → tool calls → a knowlyr action: the one parser every chat policy uses.

A chat model answers in one of a few shapes. This module turns any of them into an action
``{"tool", "params", "thought"}`` by the same rules for every policy (a local checkpoint, an
OpenAI-compatible endpoint through the SDK or raw HTTP):

1. native tool calls — an OpenAI ``tool_calls`` entry (``action_from_message``) or a Hermes
   ``<tool_call>{"name", "arguments"}</tool_call>`` block in the text. ``ToolCallParser`` is an
   incremental state machine over text chunks (``content`` → ``tool_call`` → ``content`` …,
   then ``done``): a block closes at ``</tool_call>``, an unclosed final block is accepted
   (generation may stop at end-of-turn before the tag), and a block whose JSON fails stays in
   the content and is reported in ``errors``;
2. ``Thought: ... Action: ...`` text, where the action is a JSON call object, ``name {json}``,
   ``name(...)`` (JSON, ``key=value`` literals or one literal) or ``name free text`` (the text
   fills the tool's single required parameter, else ``{"input": text}``); a hallucinated
   ``Observation:`` after it is cut;
3. a bare or ```json fenced JSON call object.

A call object may be ``{"name", "arguments"}`` (arguments may be a JSON string),
``{"name", "parameters"}``, ``{"tool", "params"}`` or ``{"function": {...}}``. A policy acts on
the first call of a reply.

Two fallbacks are shared by every policy:

* arguments that are not valid JSON or not a JSON object: the action still names the tool, its
  ``params`` are ``{}`` and ``action["format_error"]`` says what was wrong. The environment then
  rejects the call or observes it as it sees fit, and trainers can penalise the format;
* a reply with no tool call: the closing tool with the text — ``respond`` ``{"message": text}``
  by default, or, given the domain's tools, the first of ``finish``/``submit``/``respond`` it has
  (``finish`` → ``message``, ``submit`` → ``answer``, ``respond`` → ``message``). When the reply
  tried to call a tool and failed (a broken block, an ``Action:`` that does not parse) the
  closing action carries ``format_error`` too.

Examples:
    >>> parse_reply('Let me look.<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>').action
    {'tool': 'bash', 'params': {'command': 'ls'}, 'thought': 'Let me look.'}
    >>> parse_reply('Thought: read it\\nAction: read_file {"path": "a.py"}').action
    {'tool': 'read_file', 'params': {'path': 'a.py'}, 'thought': 'read it'}
    >>> parse_reply("All done.", tools=["bash", "submit"]).action
    {'tool': 'submit', 'params': {'answer': 'All done.'}, 'thought': ''}
    >>> call = {"id": "c1", "function": {"name": "bash", "arguments": "{oops"}}
    >>> action_from_message({"content": None, "tool_calls": [call]})["format_error"]
    "arguments of 'bash' are not valid JSON (Expecting property name enclosed in double quotes at char 1): {oops"
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from knowlyrcore.actions import Action

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

#: The tools a reply without a tool call may become, in order of preference, and the parameter
#: that receives the reply's text.
CLOSING_TOOLS: dict[str, str] = {"finish": "message", "submit": "answer", "respond": "message"}
#: The closing tool when the policy does not know the domain's tools.
DEFAULT_CLOSING_TOOL = "respond"

_ARGUMENT_KEYS = ("arguments", "parameters", "params")
_ACTION_RE = re.compile(r"^\s*Action\s*:\s*", re.MULTILINE)
_THOUGHT_RE = re.compile(r"^\s*Thought\s*:\s*", re.MULTILINE)
_OBSERVATION_RE = re.compile(r"^\s*Observation\s*:", re.MULTILINE)
_NAME_RE = re.compile(r"([A-Za-z_][\w.\-]*)\s*(.*)", re.DOTALL)
_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


@dataclass
class FunctionCall:
    """One parsed call: a tool name and its JSON-object arguments.

    ``error`` says what was wrong with the arguments (they are then ``{}``); ``id`` is the
    endpoint's tool-call id for native calls.
    """

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    id: str | None = None

    def to_action(self, thought: str = "") -> Action:
        """The knowlyr action of this call (with ``id`` and ``format_error`` when set)."""
        action: dict[str, Any] = {"tool": self.name, "params": dict(self.arguments), "thought": thought}
        if self.id:
            action["id"] = self.id
        if self.error:
            action["format_error"] = self.error
        return action  # type: ignore[return-value]


def _clip(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_objects(text: str) -> Iterator[tuple[dict[str, Any], int, int]]:
    """Every top-level JSON object in ``text`` as ``(object, start, end)``, left to right."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            yield value, start, end
        start = text.find("{", end)


def first_json_object(text: str) -> tuple[dict[str, Any], int, int] | None:
    """The first JSON object in ``text`` as ``(object, start, end)``, or None if there is none.

    Examples:
        >>> first_json_object('say {"a": [1, {"b": 2}]} then {"c": 3}')
        ({'a': [1, {'b': 2}]}, 4, 24)
    """
    return next(_json_objects(text), None)


def _arguments(name: str, raw: Any) -> tuple[dict[str, Any], str | None]:
    """Decoded arguments of tool ``name`` and, when they are unusable, ``({}, what was wrong)``."""
    if raw is None:
        return {}, None
    if isinstance(raw, str):
        if not raw.strip():
            return {}, None
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            return {}, f"arguments of {name!r} are not valid JSON ({exc.msg} at char {exc.pos}): {_clip(exc.doc)}"
    if not isinstance(raw, dict):
        kind = _JSON_TYPES.get(type(raw), type(raw).__name__)
        return {}, f"arguments of {name!r} must be a JSON object, got {kind}"
    return raw, None


def call_from_json(obj: Any) -> FunctionCall | None:
    """A ``FunctionCall`` from any of the object shapes models and datasets use, or None if the
    object names no function.

    Accepts ``{"name", "arguments"}`` (OpenAI/Hermes; arguments may be a JSON string),
    ``{"name", "parameters"}`` (knowlyr trajectories), ``{"tool", "params"}`` (knowlyr actions)
    and ``{"function": {...}}`` (an OpenAI ``tool_calls`` entry, whose ``id`` is kept). Unusable
    arguments give a call with ``arguments == {}`` and ``error`` set.

    Examples:
        >>> call_from_json({"tool": "submit", "params": {"answer": "4"}})
        FunctionCall(name='submit', arguments={'answer': '4'}, error=None, id=None)
        >>> call_from_json({"name": "bash", "arguments": "[1]"}).error
        "arguments of 'bash' must be a JSON object, got array"
    """
    if not isinstance(obj, Mapping):
        return None
    call_id = obj.get("id") if isinstance(obj.get("id"), str) else None
    if isinstance(obj.get("function"), Mapping):
        obj = obj["function"]
    name = obj.get("name", obj.get("tool"))
    if not isinstance(name, str) or not name.strip():
        return None
    name = name.strip()
    key = next((k for k in _ARGUMENT_KEYS if k in obj), None)
    arguments, error = _arguments(name, obj[key] if key else None)
    return FunctionCall(name, arguments, error, call_id)


def _looks_like_call(obj: Mapping[str, Any]) -> bool:
    """Whether a bare JSON object in prose is meant as a call (``{"name": "Bob"}`` is not)."""
    if isinstance(obj.get("function"), Mapping) or "tool" in obj:
        return True
    return "name" in obj and any(k in obj for k in _ARGUMENT_KEYS)


# -- the <tool_call> state machine ------------------------------------------------------------


def possible_tool_call_start(text: str) -> int:
    """Index from which ``text`` could be (the start of) a tool-call block, else ``len(text)``.

    A streaming server emits text only up to this index, so a ``<tool_call>`` split over several
    tokens is never half-sent as content.

    Examples:
        >>> possible_tool_call_start("hello <tool")
        6
    """
    full = text.find(TOOL_CALL_OPEN)
    if full != -1:
        return full
    for size in range(min(len(TOOL_CALL_OPEN) - 1, len(text)), 0, -1):
        if TOOL_CALL_OPEN.startswith(text[-size:]):
            return len(text) - size
    return len(text)


class ParserState(str, Enum):
    """Where ``ToolCallParser`` is: in free text, inside a ``<tool_call>`` block, or finished."""

    CONTENT = "content"
    TOOL_CALL = "tool_call"
    DONE = "done"


class ToolCallParser:
    """Split streamed model text into content and Hermes ``<tool_call>`` calls, chunk by chunk.

    ``feed(chunk)`` returns the content that became final (never a possible tag prefix, never
    text inside a block), ``close()`` ends the text and returns the rest. ``calls`` holds the
    parsed calls, ``errors`` one message per block whose JSON failed (that block is kept in the
    content, so nothing the model wrote is lost), ``content`` the text outside parsed blocks.

    Examples:
        >>> parser = ToolCallParser()
        >>> [parser.feed(chunk) for chunk in ["Let me look. <tool", '_call>{"name": "ls",', ' "arguments": {}}']]
        ['Let me look. ', '', '']
        >>> parser.state
        <ParserState.TOOL_CALL: 'tool_call'>
        >>> parser.close(), parser.calls, parser.content
        ('', [FunctionCall(name='ls', arguments={}, error=None, id=None)], 'Let me look.')
    """

    def __init__(self) -> None:
        self.state = ParserState.CONTENT
        self.calls: list[FunctionCall] = []
        self.errors: list[str] = []
        self._buffer = ""  # text not classified yet: a possible tag prefix, or an open block's body
        self._content: list[str] = []

    @property
    def content(self) -> str:
        """The text outside parsed blocks so far, stripped."""
        return "".join(self._content).strip()

    def feed(self, chunk: str) -> str:
        """Consume ``chunk``; return the content it made final."""
        if self.state is ParserState.DONE:
            raise ValueError("ToolCallParser.feed() after close()")
        self._buffer += chunk
        out: list[str] = []
        while True:
            if self.state is ParserState.CONTENT:
                start = self._buffer.find(TOOL_CALL_OPEN)
                if start == -1:
                    safe = possible_tool_call_start(self._buffer)
                    out.append(self._buffer[:safe])
                    self._buffer = self._buffer[safe:]
                    break
                out.append(self._buffer[:start])
                self._buffer = self._buffer[start + len(TOOL_CALL_OPEN) :]
                self.state = ParserState.TOOL_CALL
            else:
                end = self._buffer.find(TOOL_CALL_CLOSE)
                if end == -1:
                    break
                out.append(self._end_block(self._buffer[:end], closed=True))
                self._buffer = self._buffer[end + len(TOOL_CALL_CLOSE) :]
                self.state = ParserState.CONTENT
        return self._emit("".join(out))

    def close(self) -> str:
        """End of text: an open block is parsed as if closed; return the content that remained."""
        if self.state is ParserState.DONE:
            return ""
        rest = self._end_block(self._buffer, closed=False) if self.state is ParserState.TOOL_CALL else self._buffer
        self._buffer = ""
        self.state = ParserState.DONE
        return self._emit(rest)

    def _emit(self, text: str) -> str:
        self._content.append(text)
        return text

    def _end_block(self, body: str, *, closed: bool) -> str:
        """Parse one block's body: a call is recorded (nothing to emit), else the block is content."""
        found = first_json_object(body)
        call = call_from_json(found[0]) if found else None
        if call is not None:
            self.calls.append(call)
            return ""
        try:
            json.loads(body)
            problem = "names no function"
        except json.JSONDecodeError as exc:
            problem = f"is not valid JSON ({exc.msg} at char {exc.pos})"
        self.errors.append(f"{TOOL_CALL_OPEN} block {problem}: {_clip(body)}")
        return TOOL_CALL_OPEN + body + (TOOL_CALL_CLOSE if closed else "")


def parse_tool_calls(text: str) -> tuple[str, list[FunctionCall]]:
    """Split complete ``text`` into ``(content, calls)``: content is the text outside parsed
    ``<tool_call>`` blocks, stripped (``ToolCallParser`` also reports the blocks that failed).

    Examples:
        >>> parse_tool_calls('Let me look.\\n<tool_call>\\n{"name": "ls", "arguments": {"path": "."}}\\n</tool_call>')
        ('Let me look.', [FunctionCall(name='ls', arguments={'path': '.'}, error=None, id=None)])
    """
    parser = ToolCallParser()
    parser.feed(text)
    parser.close()
    return parser.content, parser.calls


# -- tools and the closing action --------------------------------------------------------------


def _tool_parameters(tools: Sequence[Any] | None) -> dict[str, dict[str, Any] | None]:
    """Tool name → JSON-schema parameters (None if unknown) for the tool forms policies take:
    names, OpenAI function schemas, ``{"name", "parameters"}`` dicts, objects like ``ToolSpec``."""
    specs: dict[str, dict[str, Any] | None] = {}
    for tool in tools or []:
        if isinstance(tool, str):
            name, parameters = tool, None
        elif isinstance(tool, Mapping):
            function = tool["function"] if isinstance(tool.get("function"), Mapping) else tool
            name, parameters = function.get("name"), function.get("parameters")
        else:
            name, parameters = getattr(tool, "name", None), getattr(tool, "parameters", None)
        if isinstance(name, str) and name:
            specs[name] = parameters if isinstance(parameters, Mapping) else None
    return specs


def _single_parameter(tool: str, tools: Sequence[Any] | None) -> str | None:
    """The parameter free text fills: the tool's only required one, else its only one."""
    parameters = _tool_parameters(tools).get(tool) or {}
    required = parameters.get("required") or []
    properties = list(parameters.get("properties") or {})
    if len(required) == 1:
        return required[0]
    if len(properties) == 1:
        return properties[0]
    return None


def select_closing_tool(tools: Sequence[Any] | None = None) -> str:
    """The first of ``finish``, ``submit``, ``respond`` among ``tools``, else ``respond``.

    Examples:
        >>> select_closing_tool(["bash", "submit", "finish"])
        'finish'
        >>> select_closing_tool()
        'respond'
    """
    names = _tool_parameters(tools)
    return next((tool for tool in CLOSING_TOOLS if tool in names), DEFAULT_CLOSING_TOOL)


def closing_action(
    text: str, tools: Sequence[Any] | None = None, *, closing_tool: str | None = None, format_error: str | None = None
) -> Action:
    """The action of a reply that calls no tool: the closing tool with the reply's text.

    ``closing_tool`` overrides the choice of ``select_closing_tool(tools)``; a tool outside
    ``CLOSING_TOOLS`` gets the text in its single parameter (else ``message``).

    Examples:
        >>> closing_action("Hi!", closing_tool="say", tools=[{"name": "say", "parameters": {"required": ["text"]}}])
        {'tool': 'say', 'params': {'text': 'Hi!'}, 'thought': ''}
    """
    tool = closing_tool or select_closing_tool(tools)
    parameter = CLOSING_TOOLS.get(tool) or _single_parameter(tool, tools) or "message"
    action: dict[str, Any] = {"tool": tool, "params": {parameter: text.strip()}, "thought": ""}
    if format_error:
        action["format_error"] = format_error
    return action  # type: ignore[return-value]


# -- text replies --------------------------------------------------------------------------------


@dataclass
class ParsedReply:
    """What a reply's text amounts to.

    ``style`` is ``"tool_call"`` (a ``<tool_call>`` block), ``"text"`` (``Action:`` text or a
    bare JSON call) or ``"reply"`` (no call: ``action`` is the closing tool). ``content`` is the
    text outside parsed blocks, ``calls`` every parsed block, ``errors`` every format problem met.
    """

    action: Action
    style: str
    content: str
    calls: list[FunctionCall]
    errors: list[str]


def _thought(text: str) -> str:
    return _THOUGHT_RE.sub("", text.strip(), count=1).strip()


def _python_arguments(name: str, inner: str, tools: Sequence[Any] | None) -> dict[str, Any] | None:
    """``key=literal, ...`` or one positional literal from ``name(inner)``, else None."""
    try:
        call = ast.parse(f"f({inner})", mode="eval").body
        assert isinstance(call, ast.Call)
        keywords = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg is not None}
        positional = [ast.literal_eval(arg) for arg in call.args]
    except (SyntaxError, ValueError, TypeError, AssertionError, RecursionError):
        return None
    if len(keywords) != len(call.keywords) or (positional and keywords) or len(positional) > 1:
        return None
    if positional:
        return {_single_parameter(name, tools) or "input": positional[0]}
    return keywords


def _call_from_action_text(text: str, tools: Sequence[Any] | None) -> tuple[FunctionCall | None, str | None]:
    """The call written after ``Action:``, or ``(None, what was wrong)``."""
    text = text.strip()
    if text.startswith("{"):
        found = first_json_object(text)
        call = call_from_json(found[0]) if found and found[1] == 0 else None
        return (call, None) if call else (None, f"Action: is not a JSON call object: {_clip(text)}")
    match = _NAME_RE.match(text)
    if match is None:
        return None, f"Action: names no tool: {_clip(text)}"
    name, rest = match.group(1), match.group(2).strip()
    if rest.startswith("(") and rest.endswith(")"):  # name(...) call syntax
        rest = rest[1:-1].strip()
        if rest and not rest.startswith("{"):
            arguments = _python_arguments(name, rest, tools)
            if arguments is not None:
                return FunctionCall(name, arguments), None
    if not rest:
        return FunctionCall(name), None
    if rest.startswith("{"):
        try:
            value, _ = json.JSONDecoder().raw_decode(rest)
        except json.JSONDecodeError:
            value = rest  # reported as unparseable arguments below
        arguments, error = _arguments(name, value)
        return FunctionCall(name, arguments, error), None
    return FunctionCall(name, {_single_parameter(name, tools) or "input": rest}), None


def parse_reply(text: str, tools: Sequence[Any] | None = None, *, closing_tool: str | None = None) -> ParsedReply:
    """The action in a model's text reply by the module's rules, falling back to the closing tool.

    ``tools`` (names, OpenAI schemas, ``{"name", "parameters"}`` dicts or ``ToolSpec``s) choose
    the closing tool and the parameter free ``Action:`` text fills.

    Examples:
        >>> parse_reply('Sure:\\n```json\\n{"name": "ls", "arguments": {}}\\n```').action
        {'tool': 'ls', 'params': {}, 'thought': 'Sure:'}
        >>> reply = parse_reply("<tool_call>{not json}</tool_call>")
        >>> reply.style, reply.action["tool"], reply.action["format_error"]
        ('reply', 'respond', '<tool_call> block is not valid JSON (Expecting property name ... at char 1): {not json}')
    """
    parser = ToolCallParser()
    parser.feed(text)
    parser.close()
    content, calls, errors = parser.content, parser.calls, list(parser.errors)
    if calls:
        return ParsedReply(calls[0].to_action(_thought(content)), "tool_call", content, calls, errors)
    action_match = _ACTION_RE.search(content)
    if action_match is not None:
        rest = content[action_match.end() :]
        observation = _OBSERVATION_RE.search(rest)  # a model may go on to hallucinate the observation
        call, error = _call_from_action_text(rest[: observation.start()] if observation else rest, tools)
        if call is not None:
            return ParsedReply(
                call.to_action(_thought(content[: action_match.start()])), "text", content, calls, errors
            )
        errors.append(error or "")
    for obj, start, _ in _json_objects(content):
        call = call_from_json(obj) if _looks_like_call(obj) else None
        if call is not None:
            before = content[:start].rstrip().removesuffix("```json").removesuffix("```")
            return ParsedReply(call.to_action(_thought(before)), "text", content, calls, errors)
    action = closing_action(content, tools, closing_tool=closing_tool, format_error="; ".join(errors) or None)
    return ParsedReply(action, "reply", content, calls, errors)


def _message_text(content: Any) -> str:
    """The text of a message's ``content``: a string, None, or a list of ``{"type": "text"}`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    return str(content)


def action_from_message(message: Any, tools: Sequence[Any] | None = None, *, closing_tool: str | None = None) -> Action:
    """The action of an OpenAI-style assistant message (a dict, or an SDK object with ``model_dump``).

    The first ``tool_calls`` entry (or a legacy ``function_call``) is the action, its ``id``
    kept (``"call_0"`` when the endpoint gave none) and the content as the thought; without a
    usable native call the content is parsed as text by ``parse_reply``.

    Examples:
        >>> call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
        >>> action_from_message({"content": "Look first.", "tool_calls": [call]})
        {'tool': 'bash', 'params': {'command': 'ls'}, 'thought': 'Look first.', 'id': 'c1'}
        >>> action_from_message({"content": "Done."}, tools=["bash", "finish"])
        {'tool': 'finish', 'params': {'message': 'Done.'}, 'thought': ''}
    """
    if not isinstance(message, Mapping) and hasattr(message, "model_dump"):
        message = message.model_dump(exclude_none=True)
    if not isinstance(message, Mapping):
        raise TypeError(f"an assistant message is a dict, got {type(message).__name__}")
    content = _message_text(message.get("content"))
    native = list(message.get("tool_calls") or [])
    if not native and isinstance(message.get("function_call"), Mapping):
        native = [{"function": message["function_call"]}]
    native_error = None
    if native:
        call = call_from_json(native[0])
        if call is not None:
            call.id = call.id or "call_0"
            return call.to_action(_thought(content))
        native_error = f"tool call names no function: {_clip(json.dumps(native[0], default=str))}"
    reply = parse_reply(content, tools, closing_tool=closing_tool)
    if native_error and reply.style == "reply":
        reply.action["format_error"] = "; ".join([native_error, *reply.errors])  # type: ignore[typeddict-unknown-key]
    return reply.action
