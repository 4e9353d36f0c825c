"""OpenAI chat-completions wire format: validate requests, shape responses and stream chunks.

Only what a local single-model server can honour is accepted; anything else is rejected with an
OpenAI-style error body (``{"error": {"message", "type", "param", "code"}}``) naming the field,
never silently ignored. ``tool_choice`` ``"required"`` or a named function is accepted but not
enforced (decoding is not constrained): the model decides whether to call a tool.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from agenttrainer.inference import Completion
from agenttrainer.models.tool_calls import ToolCall

ROLES = {"system", "developer", "user", "assistant", "tool"}
MAX_STOP_STRINGS = 4


class RequestError(ValueError):
    """A request the server refuses; ``status`` is the HTTP status, ``param`` the offending field."""

    def __init__(self, message: str, *, param: str | None = None, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.status, self.code = param, status, code

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": self.code}}


@dataclass
class ChatRequest:
    """A validated ``/v1/chat/completions`` request."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    max_tokens: int | None
    temperature: float | None
    top_p: float | None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False


def _text_content(content: Any, where: str) -> str | None:
    """Message content as text: a string, None, or a list of ``{"type": "text"}`` parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(f"{where}.content[{j}]: only text parts are supported", param=f"{where}.content")
            texts.append(part["text"])
        return "".join(texts)
    raise RequestError(f"{where}.content must be a string, a list of text parts or null", param=f"{where}.content")


def _message(raw: Any, i: int) -> dict[str, Any]:
    where = f"messages[{i}]"
    if not isinstance(raw, dict):
        raise RequestError(f"{where} must be an object", param=where)
    role = raw.get("role")
    if role not in ROLES:
        raise RequestError(f"{where}.role must be one of {sorted(ROLES)}, got {role!r}", param=f"{where}.role")
    message: dict[str, Any] = {
        "role": "system" if role == "developer" else role,
        "content": _text_content(raw.get("content"), where),
    }
    if role == "assistant" and raw.get("tool_calls"):
        calls = raw["tool_calls"]
        if not isinstance(calls, list) or not all(
            isinstance(c, dict) and isinstance(c.get("function"), dict) for c in calls
        ):
            raise RequestError(
                f"{where}.tool_calls must be a list of {{'function': {{...}}}}", param=f"{where}.tool_calls"
            )
        message["tool_calls"] = calls
    return message


def _number(body: dict[str, Any], key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise RequestError(f"{key} must be a number in [{low}, {high}], got {value!r}", param=key)
    return float(value)


def _valid_tools(tools: Any) -> bool:
    return isinstance(tools, list) and all(
        isinstance(t, dict)
        and t.get("type") == "function"
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
        for t in tools
    )


def parse_chat_request(body: Any, served_model: str) -> ChatRequest:
    """Validate a request body; raises ``RequestError``."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    model = body.get("model")
    if model != served_model:
        raise RequestError(
            f"model {model!r} is not served here; this server serves {served_model!r}",
            param="model",
            status=404,
            code="model_not_found",
        )
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise RequestError("messages must be a non-empty list", param="messages")
    messages = [_message(m, i) for i, m in enumerate(raw_messages)]

    tools = body.get("tools") or None
    if tools is not None and not _valid_tools(tools):
        raise RequestError("tools must be a list of {'type': 'function', 'function': {'name': ...}}", param="tools")
    if body.get("tool_choice") == "none":
        tools = None  # the model must not call tools, so it is not told about them

    n = body.get("n", 1)
    if n != 1:
        raise RequestError("only n=1 is supported", param="n")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise RequestError(f"max_tokens must be a positive integer, got {max_tokens!r}", param="max_tokens")
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or len(stop) > MAX_STOP_STRINGS or not all(isinstance(s, str) and s for s in stop):
        raise RequestError(f"stop must be a string or a list of up to {MAX_STOP_STRINGS} strings", param="stop")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise RequestError("seed must be an integer", param="seed")
    stream_options = body.get("stream_options") or {}
    return ChatRequest(
        model=model,
        messages=messages,
        tools=tools,
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=_number(body, "top_p", 0.0, 1.0),
        stop=stop,
        seed=seed,
        stream=bool(body.get("stream", False)),
        include_usage=bool(isinstance(stream_options, dict) and stream_options.get("include_usage")),
    )


def new_completion_id() -> str:
    return "chatcmpl-" + secrets.token_hex(12)


def tool_call_json(call: ToolCall, index: int | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": "call_" + secrets.token_hex(12),
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
    }
    if index is not None:  # stream deltas carry the call's position
        entry = {"index": index, **entry}
    return entry


def usage_json(completion: Completion) -> dict[str, int]:
    return {
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.completion_tokens,
        "total_tokens": completion.prompt_tokens + completion.completion_tokens,
    }


def completion_json(
    completion_id: str, model: str, completion: Completion, content: str | None, calls: list[ToolCall]
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content if (content or not calls) else None}
    if calls:
        message["tool_calls"] = [tool_call_json(c) for c in calls]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if calls else completion.finish_reason,
            }
        ],
        "usage": usage_json(completion),
    }


def chunk_json(
    completion_id: str,
    model: str,
    delta: dict[str, Any] | None,
    finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``delta=None`` makes the usage-only chunk (no choices)."""
    chunk: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [],
    }
    if delta is not None:
        chunk["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def sse(payload: dict[str, Any] | str) -> str:
    """A server-sent event line; OpenAI ends the stream with the literal ``[DONE]``."""
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n"
