"""OpenAI wire format: validate requests, shape responses and stream chunks.

Chat completions (``/v1/chat/completions``) for agents and clients; legacy completions
(``/v1/completions``) with vLLM's token extensions (``prompt`` as token ids, ``return_token_ids``,
``skip_special_tokens``) for online RL, which must train on exactly the tokens it sampled.

Only what a local single-model server can honour is accepted, and every field read has its type
checked (``"stream": "false"`` is refused, not truthy); anything else is rejected with an
OpenAI-style error body (``{"error": {"message", "type", "param", "code"}}``) naming the field,
never silently ignored. Every string of a request, at any depth and dictionary keys included
(``stop``, tool names and schemas, ``logit_bias`` keys, ``model``, ``user``, message content, ...),
must be valid Unicode text (``refuse_invalid_text``, one check for all of them), and
``top_logprobs`` times ``max_tokens`` is capped (``MAX_LOGPROB_ENTRIES``). ``tool_choice``
``"required"`` or a named function is accepted but not enforced (decoding is not constrained):
the model decides whether to call a tool.
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agenttrainer.acting.generators import TokenSample
from agenttrainer.acting.inference import Completion
from agenttrainer.errors import TrainerError
from knowlyrcore.tool_parsing import FunctionCall

ROLES = {"system", "developer", "user", "assistant", "tool"}
TOOL_CHOICES = {"none", "auto", "required"}
MAX_STOP_STRINGS = 4
MAX_STOP_LENGTH = 256  # characters; generation matches every stop string against the whole vocabulary
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.manual_seed accepts
MAX_COMPLETION_PROMPTS = 256  # prompts in one /v1/completions batch (one generate call)
MAX_TOP_LOGPROBS = 20  # OpenAI's cap on a chat request's top_logprobs
# top_logprobs x max_tokens at most. Every answer token keeps its top_logprobs alternatives (Python
# tuples, then a JSON object each with the token's text and bytes) until the whole answer is sent, so
# a request's logprob memory grows with the product: 20 x 4096 once held ~680 MB for minutes. This
# keeps it a fifth of that at worst, and still allows all 20 alternatives over 819 tokens, 5 over
# 3276, or 1 over 16384 (the sampled token's own log-prob, top_logprobs 0, is not counted).
MAX_LOGPROB_ENTRIES = 16384


class RequestError(TrainerError, ValueError):
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
    top_logprobs: int | None = None  # None: no logprobs asked for; k: each token's and its k likeliest


def refuse_invalid_text(body: Any) -> None:
    """Refuse (400, naming the field) a request with a string, or a dictionary key, anywhere in it
    that is not valid Unicode text.

    JSON may escape a lone UTF-16 surrogate (``"\\ud800"``), which the decoder turns into a ``str``
    that no UTF-8 encoder takes: left in, it raised ``UnicodeEncodeError`` wherever it was first
    encoded (a 500 for a ``stop`` string, a stream cut short mid-answer, or a field silently
    ignored). One walk over the whole body, before any field is read, so every field, present or
    future, gets the same 400, and a streaming request is refused before its stream starts.
    Iterative, as ``limits.json_depth``: the body's nesting is capped, not the recursion it needs.
    """
    if not isinstance(body, (dict, list)):
        return
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(body, ())]
    while stack:
        node, path = stack.pop()
        for key, child in node.items() if isinstance(node, dict) else enumerate(node):
            if isinstance(key, str) and not _is_text(key):
                where = _field(path) or "the request body"
                raise RequestError(
                    f"{where} has a key that is not valid Unicode text (a lone surrogate such as \\ud800)",
                    param=_field(path) or None,
                    code="invalid_text",
                )
            if isinstance(child, str) and not _is_text(child):
                raise RequestError(
                    f"{_field((*path, key))} is not valid Unicode text (a lone surrogate such as \\ud800)",
                    param=_field((*path, key)),
                    code="invalid_text",
                )
            if isinstance(child, (dict, list)):
                stack.append((child, (*path, key)))


def _is_text(value: str) -> bool:
    """Whether ``value`` encodes as UTF-8: it holds no lone surrogate."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _field(path: tuple[str | int, ...]) -> str:
    """A field's path as errors name it: ``tools[0].function.name``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else part
    return text


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
    if not isinstance(role, str) or role not in ROLES:
        raise RequestError(f"{where}.role must be one of {sorted(ROLES)}, got {role!r}", param=f"{where}.role")
    message: dict[str, Any] = {
        "role": "system" if role == "developer" else role,
        "content": _text_content(raw.get("content"), where),
    }
    if role == "assistant" and raw.get("tool_calls"):
        calls = raw["tool_calls"]
        if not isinstance(calls, list) or not all(_valid_call(c) for c in calls):
            raise RequestError(
                f"{where}.tool_calls must be a list of {{'function': {{'name': str, 'arguments': str or object}}}}",
                param=f"{where}.tool_calls",
            )
        message["tool_calls"] = calls
    return message


def _valid_call(call: Any) -> bool:
    function = call.get("function") if isinstance(call, dict) else None
    return (
        isinstance(function, dict)
        and isinstance(function.get("name"), str)
        and isinstance(function.get("arguments", "{}"), (str, dict))
    )


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
        and isinstance(t["function"].get("description", ""), str)
        and isinstance(t["function"].get("parameters", {}), dict)
        for t in tools
    )


def _tool_choice(value: Any) -> str | None:
    """``tool_choice``: ``"none"``, ``"auto"``, ``"required"`` or a named function (not enforced)."""
    if value is None or (isinstance(value, str) and value in TOOL_CHOICES):
        return value
    function = value.get("function") if isinstance(value, dict) else None
    if isinstance(function, dict) and value.get("type") == "function" and isinstance(function.get("name"), str):
        return "required"
    raise RequestError(
        "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}",
        param="tool_choice",
    )


def _served_model(body: Any, served_model: str) -> str:
    """The request's ``model``, which must be the served one (404 otherwise, as OpenAI answers)."""
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
    return model


def _max_tokens(body: dict[str, Any], key: str, limit: int | None) -> int | None:
    """A positive integer up to ``limit`` (``serve --max-tokens-limit``); a larger one is refused, never clamped."""
    value = body.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise RequestError(f"{key} must be a positive integer, got {value!r}", param=key)
    if value is not None and limit is not None and value > limit:
        raise RequestError(
            f"{key}={value} is above this server's limit of {limit}", param=key, code="max_tokens_too_large"
        )
    return value


def _seed(value: Any) -> int | None:
    low, high = SEED_RANGE
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high):
        raise RequestError(f"seed must be an integer in [{low}, {high}]", param="seed")
    return value


def _n(body: dict[str, Any], hint: str = "") -> None:
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n != 1):
        raise RequestError(f"only n=1 is supported{hint}", param="n")


def parse_chat_request(
    body: Any,
    served_model: str,
    *,
    max_tokens_limit: int | None = None,
    max_tools_bytes: int | None = None,
    default_max_tokens: int | None = None,
) -> ChatRequest:
    """Validate a request body; raises ``RequestError``.

    Every field read has its type checked (``"stream": "false"`` is refused, not truthy), and every
    string must be valid text (``refuse_invalid_text``); ``max_tokens_limit`` bounds ``max_tokens``,
    ``max_tools_bytes`` the size of ``tools`` as JSON. ``default_max_tokens`` (the server's, for a
    request without ``max_tokens``) counts against ``MAX_LOGPROB_ENTRIES``.
    """
    refuse_invalid_text(body)  # first: no later check (nor the 404 for ``model``) sees a bad string
    model = _served_model(body, served_model)
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise RequestError("messages must be a non-empty list", param="messages")
    messages = [_message(m, i) for i, m in enumerate(raw_messages)]

    tools = body.get("tools") or None
    if tools is not None and not _valid_tools(tools):
        raise RequestError(
            "tools must be a list of {'type': 'function', 'function': {'name': str, 'description': str, "
            "'parameters': object}}",
            param="tools",
        )
    if tools is not None and max_tools_bytes is not None and len(json.dumps(tools)) > max_tools_bytes:
        raise RequestError(
            f"tools take more than {max_tools_bytes} bytes as JSON", param="tools", code="tools_too_large"
        )
    if _tool_choice(body.get("tool_choice")) == "none":
        tools = None  # the model must not call tools, so it is not told about them

    _n(body)
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _max_tokens(body, key, max_tokens_limit)
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if (
        not isinstance(stop, list)
        or len(stop) > MAX_STOP_STRINGS
        or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_LENGTH for s in stop)
    ):
        raise RequestError(
            f"stop must be a string or a list of up to {MAX_STOP_STRINGS} strings of 1 to {MAX_STOP_LENGTH} characters",
            param="stop",
        )
    seed = _seed(body.get("seed"))
    stream_options = body.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise RequestError("stream_options must be an object or null", param="stream_options")
    stream = _flag(body, "stream", False)
    top_logprobs = _chat_logprobs(body, stream)
    _logprob_budget(top_logprobs, key, max_tokens, default_max_tokens)
    return ChatRequest(
        model=model,
        messages=messages,
        tools=tools,
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=_number(body, "top_p", 0.0, 1.0),
        stop=stop,
        seed=seed,
        stream=stream,
        include_usage=_flag(stream_options or {}, "include_usage", False, param="stream_options.include_usage"),
        top_logprobs=top_logprobs,
    )


def _chat_logprobs(body: dict[str, Any], stream: bool) -> int | None:
    """``top_logprobs`` when the request asks for logprobs (``logprobs: true``), else None."""
    top = body.get("top_logprobs")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS):
        raise RequestError(
            f"top_logprobs must be an integer in [0, {MAX_TOP_LOGPROBS}] or null, got {top!r}", param="top_logprobs"
        )
    if not _flag(body, "logprobs", False):
        if top is not None:
            raise RequestError("top_logprobs needs logprobs: true", param="top_logprobs")
        return None
    if stream:
        raise RequestError("logprobs are not streamed by this server: ask without stream", param="logprobs")
    return top or 0


def _logprob_budget(top_logprobs: int | None, key: str, max_tokens: int | None, default: int | None) -> None:
    """Refuse ``top_logprobs`` x ``max_tokens`` past ``MAX_LOGPROB_ENTRIES`` (400 naming both): the
    alternatives of every answer token are held until the answer is sent. Refused, never clamped."""
    tokens = max_tokens if max_tokens is not None else default
    if not top_logprobs or tokens is None or top_logprobs * tokens <= MAX_LOGPROB_ENTRIES:
        return
    asked = f"{key}={tokens}" if max_tokens is not None else f"{key} (the server's default, {tokens})"
    raise RequestError(
        f"top_logprobs={top_logprobs} with {asked} asks for {top_logprobs * tokens} alternatives; this server "
        f"returns at most {MAX_LOGPROB_ENTRIES} (top_logprobs x {key}): lower either",
        param="top_logprobs",
        code="logprobs_too_large",
    )


def logprobs_json(
    logprobs: list[tuple[int, float, list[tuple[int, float]]]], decode: Callable[[int], str]
) -> dict[str, Any]:
    """A chat choice's ``logprobs`` in OpenAI's shape: per token its text, UTF-8 bytes, log-prob and
    ``top_logprobs`` alternatives."""

    def entry(token: int, logprob: float) -> dict[str, Any]:
        text = decode(token)
        return {"token": text, "logprob": max(logprob, MIN_LOGPROB), "bytes": list(text.encode("utf-8"))}

    return {
        "content": [
            {**entry(token, logprob), "top_logprobs": [entry(t, lp) for t, lp in top]}
            for token, logprob, top in logprobs
        ]
    }


def new_completion_id(prefix: str = "chatcmpl-") -> str:
    return prefix + secrets.token_hex(12)


def tool_call_json(call: FunctionCall, index: int | None = None) -> dict[str, Any]:
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
    completion_id: str,
    model: str,
    completion: Completion,
    content: str | None,
    calls: list[FunctionCall],
    logprobs: dict[str, Any] | None = None,
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
                "logprobs": logprobs,
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


# -- legacy completions over token ids (/v1/completions) ---------------------------------

# Fields of OpenAI's or vLLM's completions API that would change the answer and that sampling here
# cannot honour. Each is accepted only at a value meaning "off", so no client silently gets a
# different answer (e.g. past a stop string it asked for) than the one it requested.
UNSUPPORTED_COMPLETION_FIELDS: dict[str, tuple[Any, ...]] = {
    "suffix": (None, ""),
    "best_of": (None, 1),
    "stop": (None, "", []),
    "stop_token_ids": (None, []),
    "logit_bias": (None, {}),
    "presence_penalty": (None, 0),
    "frequency_penalty": (None, 0),
    "repetition_penalty": (None, 1),
    "top_k": (None, -1, 0),
    "min_p": (None, 0),
    "min_tokens": (None, 0),
    "prompt_logprobs": (None,),
    "ignore_eos": (None, False),
    "truncate_prompt_tokens": (None,),
    "response_format": (None,),
    "guided_json": (None,),
    "guided_regex": (None,),
    "guided_choice": (None,),
    "guided_grammar": (None,),
}
MIN_LOGPROB = -9999.0
DEFAULT_COMPLETION_TEMPERATURE = 1.0  # OpenAI's and vLLM's: a completions client that sets none expects sampling


@dataclass
class CompletionRequest:
    """A validated ``/v1/completions`` request; string prompts are already token ids."""

    model: str
    prompts: list[list[int]]
    batched: bool  # ``prompt`` was a list of prompts, so errors name ``prompt[i]``
    max_tokens: int | None
    temperature: float = DEFAULT_COMPLETION_TEMPERATURE
    top_p: float = 1.0
    seed: int | None = None
    logprobs: bool = False
    return_token_ids: bool = False
    skip_special_tokens: bool = True

    def param(self, i: int) -> str:
        """The request field holding prompt ``i``, for error bodies."""
        return f"prompt[{i}]" if self.batched else "prompt"


def _flag(body: dict[str, Any], key: str, default: bool, *, param: str | None = None) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(f"{param or key} must be true or false, got {value!r}", param=param or key)
    return value


@dataclass(frozen=True)
class PromptCaps:
    """How long a prompt may be; ``max_chars`` refuses a text before it is tokenized (no text of
    more characters can fit ``max_tokens``). ``is_context``: the cap is the model's context length."""

    max_tokens: int
    max_chars: int
    is_context: bool = False


def _prompt(raw: Any, where: str, vocab_size: int, tokenize: Callable[[str], list[int]], caps: PromptCaps) -> list[int]:
    """One prompt as token ids: a string (tokenized) or a list of ids the model can embed."""
    if isinstance(raw, str):
        if len(raw) > caps.max_chars:
            raise prompt_too_long(where, f"{len(raw)} characters", caps)
        ids = tokenize(raw) if raw else []
        if not ids:
            raise RequestError(f"{where} is empty: a prompt needs at least one token", param=where)
        if len(ids) > caps.max_tokens:
            raise prompt_too_long(where, f"{len(ids)} tokens", caps)
        return ids
    if not isinstance(raw, list):
        raise RequestError(f"{where} must be a string or a list of token ids, got {type(raw).__name__}", param=where)
    if not raw:
        raise RequestError(f"{where} is an empty list: a prompt needs at least one token", param=where)
    if len(raw) > caps.max_tokens:
        raise prompt_too_long(where, f"{len(raw)} tokens", caps)
    for j, token in enumerate(raw):
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < vocab_size:
            raise RequestError(f"{where}[{j}] must be a token id in [0, {vocab_size}), got {token!r}", param=where)
    return list(raw)


def prompt_too_long(where: str, size: str, caps: PromptCaps) -> RequestError:
    """The error for a prompt past the cap: the model's context or ``serve --max-prompt-tokens``."""
    if caps.is_context:
        return RequestError(
            f"{where} has {size}; the model's context is {caps.max_tokens}",
            param=where,
            code="context_length_exceeded",
        )
    return RequestError(
        f"{where} has {size}; this server accepts prompts of up to {caps.max_tokens} tokens",
        param=where,
        code="prompt_too_long",
    )


def _prompts(
    raw: Any, vocab_size: int, tokenize: Callable[[str], list[int]], caps: PromptCaps
) -> tuple[list[list[int]], bool]:
    """``prompt`` as a list of token id lists, and whether it was a batch.

    ``"text"`` and ``[ids]`` are one prompt; ``["text", [ids], ...]`` is a batch, told apart by
    its first element (a batch may mix strings and id lists).
    """
    if isinstance(raw, list) and raw and isinstance(raw[0], (str, list)):
        if len(raw) > MAX_COMPLETION_PROMPTS:
            raise RequestError(
                f"prompt is a batch of {len(raw)} prompts; this server takes up to {MAX_COMPLETION_PROMPTS} per request",
                param="prompt",
            )
        return [_prompt(p, f"prompt[{i}]", vocab_size, tokenize, caps) for i, p in enumerate(raw)], True
    if isinstance(raw, str) or (isinstance(raw, list) and raw):
        return [_prompt(raw, "prompt", vocab_size, tokenize, caps)], False
    raise RequestError(
        "prompt must be a string, a list of token ids, or a non-empty list of such (a batch)", param="prompt"
    )


def parse_completion_request(
    body: Any,
    served_model: str,
    *,
    vocab_size: int,
    tokenize: Callable[[str], list[int]],
    caps: PromptCaps | None = None,
    max_tokens_limit: int | None = None,
) -> CompletionRequest:
    """Validate a ``/v1/completions`` body; raises ``RequestError``.

    ``vocab_size`` bounds the token ids a prompt may hold (the rows of the model's embedding);
    ``tokenize`` turns a string prompt into ids (plain tokenization, no chat template); ``caps``
    bounds each prompt, ``max_tokens_limit`` the ``max_tokens`` asked for.
    """
    refuse_invalid_text(body)  # first: no later check, nor the tokenizer, sees a bad string
    model = _served_model(body, served_model)
    for key, neutral in UNSUPPORTED_COMPLETION_FIELDS.items():
        if body.get(key) not in neutral:
            raise RequestError(f"{key} is not supported by this server; omit it", param=key)
    _n(body, hint="; repeat a prompt in the batch for more answers")
    if _flag(body, "echo", False):
        raise RequestError("echo is not supported; return_token_ids gives the prompt's token ids", param="echo")
    if _flag(body, "stream", False):
        raise RequestError(
            "stream is not supported on /v1/completions (answers come back whole); /v1/chat/completions streams",
            param="stream",
        )
    logprobs = body.get("logprobs")
    if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int) or logprobs < 0):
        raise RequestError(f"logprobs must be a non-negative integer or null, got {logprobs!r}", param="logprobs")
    if logprobs:
        raise RequestError(
            f"logprobs={logprobs} asks for each token's top alternatives, which this server does not compute; "
            "logprobs=0 gives the sampled tokens' log-probs",
            param="logprobs",
        )
    temperature = _number(body, "temperature", 0.0, 2.0)
    top_p = _number(body, "top_p", 0.0, 1.0)
    request = CompletionRequest(
        model=model,
        prompts=[],
        batched=False,
        max_tokens=_max_tokens(body, "max_tokens", max_tokens_limit),
        temperature=DEFAULT_COMPLETION_TEMPERATURE if temperature is None else temperature,
        top_p=1.0 if top_p is None else top_p,
        seed=_seed(body.get("seed")),
        logprobs=logprobs is not None,
        return_token_ids=_flag(body, "return_token_ids", False),
        skip_special_tokens=_flag(body, "skip_special_tokens", True),
    )
    # Last: tokenizing is the only costly check, so a request that is invalid anyway skips it.
    caps = caps or PromptCaps(max_tokens=2**62, max_chars=2**62)
    request.prompts, request.batched = _prompts(body.get("prompt"), vocab_size, tokenize, caps)
    return request


def text_choice_json(
    index: int,
    text: str,
    sample: TokenSample,
    prompt_ids: list[int],
    *,
    tokens: list[str] | None,
    return_token_ids: bool,
) -> dict[str, Any]:
    """One ``text_completion`` choice.

    ``tokens`` (the text of each answer token) is given when the request asked for log-probs;
    ``text_offset`` is then the running sum of their lengths, as vLLM computes it. ``token_ids``
    include the end-of-turn token when generation stopped on one, although ``text`` does not.
    """
    choice: dict[str, Any] = {"index": index, "text": text, "logprobs": None, "finish_reason": sample.finish_reason}
    if tokens is not None:
        choice["logprobs"] = {
            "tokens": tokens,
            # -inf (a token the raw distribution rules out) is not JSON; vLLM sends -9999.0 for it.
            "token_logprobs": [max(lp, MIN_LOGPROB) for lp in sample.logprobs],
            "top_logprobs": None,
            "text_offset": list(itertools.accumulate((len(t) for t in tokens[:-1]), initial=0)) if tokens else [],
        }
    if return_token_ids:
        choice["token_ids"] = sample.token_ids
        choice["prompt_token_ids"] = prompt_ids
    return choice


def text_completion_json(
    completion_id: str, model: str, choices: list[dict[str, Any]], prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    return {
        "id": completion_id,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def parse_load_weights_request(body: Any) -> str:
    """The directory a ``/v1/load_weights`` body names (``{"path": "<dir>"}``)."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    refuse_invalid_text(body)  # a lone surrogate in a path fails to encode for the file system
    path = body.get("path")
    if not isinstance(path, str) or not path:
        raise RequestError(f"path must be a non-empty string (a directory on the server), got {path!r}", param="path")
    return path
