"""Chat models someone else serves: the HTTP transport, and ``EndpointPolicy``, the one policy
for a model behind an endpoint (knowlyr-hub's ``collect`` and ``evaluate``, ``knowlyr-sandbox
run``).

Two wire formats, told apart by ``api`` (by default from the URL: ``anthropic`` for a host under
``anthropic.com``, else ``openai``):

- ``openai``: chat completions at ``{base_url}/chat/completions`` (OpenAI, vLLM, SGLang,
  ``knowlyr-trainer serve``), tools as function schemas, ``Authorization: Bearer KEY``;
- ``anthropic``: the Messages API at ``{base_url}/messages`` (``base_url``
  ``https://api.anthropic.com/v1``), ``x-api-key: KEY``. The conversation is translated both
  ways: system messages become ``system``, tool schemas ``input_schema``, ``tool_use`` blocks
  native calls and tool results ``tool_result`` blocks. The Messages API takes no sampling
  temperature (the anthropic SDK's ``messages.create`` has no such argument), so none is sent:
  the model samples as the API does.

Whatever went over the wire, ``ChatEndpoint.complete(messages, tools)`` takes an OpenAI-style
conversation and returns the reply as an OpenAI-style assistant message (``content`` a string or
None, ``tool_calls`` a list of objects), so a ``knowlyrcore.ChatTranscript`` threads both APIs
and ``knowlyrcore.action_from_message`` reads both replies. Plain ``urllib``: knowlyr-core needs
no HTTP client and no SDK.

A call that fails raises ``EndpointError`` (an ``InfrastructureError``: the model's server
failed, not the agent), naming the endpoint. An unreachable server, a timeout (``timeout`` bounds
each socket operation) and the statuses worth trying again (408, 409, 429, 5xx) are retried
``max_retries`` times, after the server's ``Retry-After`` (up to a minute) or 0.5, 1, 2, ... 8
seconds; an error status keeps the start of the server's body, which usually says what was wrong.

The reply is untrusted: a body over ``MAX_REPLY_BYTES`` is not read further, one that is not
JSON (or nested past the parser's depth) or not a chat completion is an ``EndpointError``, and
every lone surrogate in it (``"\\ud800"``: JSON can carry it, UTF-8 cannot) becomes U+FFFD. The
reply goes back to the endpoint in the next request and into the trajectory file, so
unencodable text would end the whole run; replaced, it is just a wrong answer the environment
grades.

Examples:
    >>> from knowlyrcore.domain import tool_schemas
    >>> from knowlyrcore.testing import ScriptedChatServer
    >>> with ScriptedChatServer() as server:
    ...     server.replies.append({"content": "The files are a.py and b.py."})
    ...     policy = EndpointPolicy(server.base_url, "served-model", tools=tool_schemas(["bash", "finish"], "coding"))
    ...     policy.reset()
    ...     action = policy("List the files.")
    >>> action
    {'tool': 'finish', 'params': {'message': 'The files are a.py and b.py.'}, 'thought': ''}
"""

from __future__ import annotations

import http.client
import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from knowlyrcore.errors import InfrastructureError
from knowlyrcore.policy import ChatTranscript
from knowlyrcore.tool_parsing import action_from_message

#: A list of JSON objects: OpenAI-style messages, or tool schemas.
JsonObjects = Sequence[Mapping[str, Any]]

OPENAI, ANTHROPIC = "openai", "anthropic"
APIS = (OPENAI, ANTHROPIC)
#: The Messages API version the ``anthropic`` format speaks.
ANTHROPIC_VERSION = "2023-06-01"
#: A reply body larger than this is refused unread (a policy's turn is a few kilobytes).
MAX_REPLY_BYTES = 8 << 20
#: Statuses under 500 a retry may cure (every 5xx may too): a timeout, a conflict, rate limiting.
RETRY_STATUSES = frozenset({408, 409, 429})
MAX_RETRY_WAIT = 60.0


class EndpointError(InfrastructureError):
    """A chat endpoint failed: unreachable, too slow, an error status, or a reply that is not a
    chat completion."""


class _Retryable(Exception):
    """A failure worth another attempt, and how long the server asked us to wait (None: not said)."""

    def __init__(self, problem: str, wait: float | None = None):
        super().__init__(problem)
        self.wait = wait


def api_for_url(base_url: str) -> str:
    """The wire format of ``base_url``: ``anthropic`` for a host under ``anthropic.com``, else ``openai``.

    Examples:
        >>> api_for_url("https://api.anthropic.com/v1"), api_for_url("http://127.0.0.1:8000/v1")
        ('anthropic', 'openai')
    """
    host = urllib.parse.urlsplit(base_url).hostname or ""
    return ANTHROPIC if host == "anthropic.com" or host.endswith(".anthropic.com") else OPENAI


def _valid_text(value: Any) -> Any:
    """``value`` (a string, or lists and dicts of them) with every lone surrogate replaced by U+FFFD.

    Examples:
        >>> _valid_text({"text": "a\\ud800"})
        {'text': 'a�'}
    """
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {_valid_text(key): _valid_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_valid_text(item) for item in value]
    return value


class ChatEndpoint:
    """A chat model served at ``base_url`` (``.../v1``) and the settings every call to it carries."""

    #: How errors name the endpoint (``policy endpoint http://...: ...``).
    role = "chat"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api: str | None = None,
        api_key: str | None = None,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        timeout: float = 600.0,
        max_retries: int = 2,
    ):
        api = api or api_for_url(base_url)
        if api not in APIS:
            raise ValueError(f"api must be one of {', '.join(APIS)}, got {api!r}")
        if max_tokens < 1 or timeout <= 0 or max_retries < 0:
            raise ValueError(
                f"max_tokens must be >= 1, timeout > 0 and max_retries >= 0, got {max_tokens}, {timeout} and {max_retries}"
            )
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api = api
        self.api_key = api_key
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.max_retries = max_retries

    def complete(self, messages: JsonObjects, tools: JsonObjects | None = None) -> dict[str, Any]:
        """The model's reply to ``messages`` (OpenAI-style, offering ``tools``, OpenAI schemas) as an
        OpenAI-style assistant message; raises ``EndpointError``."""
        anthropic = self.api == ANTHROPIC
        body = self._anthropic_body(messages, tools) if anthropic else self._openai_body(messages, tools)
        headers = _anthropic_headers(self.api_key) if anthropic else _openai_headers(self.api_key)
        payload = self._post("/messages" if anthropic else "/chat/completions", headers, body)
        try:
            message = _from_anthropic(payload) if anthropic else _from_openai(payload)
        except (KeyError, IndexError, TypeError) as exc:
            raise self._error(f"not a chat completion ({exc}): {_valid_text(str(payload)[:200])}") from None
        return _valid_text(message)

    def _openai_body(self, messages: JsonObjects, tools: JsonObjects | None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": list(messages)}
        if tools:
            body["tools"] = list(tools)
        return {**body, "temperature": self.temperature, "max_tokens": self.max_tokens}

    def _anthropic_body(self, messages: JsonObjects, tools: JsonObjects | None) -> dict[str, Any]:
        system = "\n\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": _to_anthropic(m for m in messages if m.get("role") != "system"),
        }
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [_anthropic_tool(tool) for tool in tools]
        return body

    def _post(self, route: str, headers: dict[str, str], body: dict[str, Any]) -> Any:
        """The decoded JSON reply to ``body`` POSTed to ``{base_url}{route}``, retried as the module says."""
        data = json.dumps(body).encode()  # ASCII: a lone surrogate in an observation travels escaped
        attempt = 0
        while True:
            try:
                return self._post_once(self.base_url + route, headers, data)
            except _Retryable as exc:
                if attempt == self.max_retries:
                    tries = f" ({attempt + 1} attempts)" if attempt else ""
                    raise self._error(f"{exc}{tries}") from None
                time.sleep(exc.wait if exc.wait is not None else min(8.0, 0.5 * 2**attempt))
                attempt += 1

    def _post_once(self, url: str, headers: dict[str, str], data: bytes) -> Any:
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read(MAX_REPLY_BYTES + 1)
        except urllib.error.HTTPError as exc:
            detail = exc.read(2000).decode("utf-8", "replace")[:500]
            problem = f"HTTP {exc.code} {exc.reason}: {detail}"
            if exc.code in RETRY_STATUSES or exc.code >= 500:
                raise _Retryable(problem, _retry_after(exc.headers.get("Retry-After"))) from None
            raise self._error(problem) from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:  # refused, reset, timed out
            raise _Retryable(f"unreachable ({getattr(exc, 'reason', None) or exc!r})") from None
        if len(raw) > MAX_REPLY_BYTES:
            raise self._error(f"the reply is over {MAX_REPLY_BYTES} bytes: not read further")
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested too deep, an int too long
            raise self._error(f"the reply is not JSON ({type(exc).__name__}: {str(exc)[:200]})") from None

    def _error(self, problem: str) -> EndpointError:
        return EndpointError(f"{self.role} endpoint {self.base_url} failed: {problem}")


class EndpointPolicy(ChatEndpoint):
    """A knowlyr ``Policy`` played by the model at ``base_url``, choosing tools by function calling.

    The episode's conversation is a ``ChatTranscript`` (``system_prompt`` first); each reply
    becomes an action by the rules every knowlyr policy shares (``action_from_message``): the
    first native call (unusable arguments give ``params == {}`` and a ``format_error``), else a
    call written in the text, else the closing tool with the text (``closing_tool``, by default
    the first of ``finish``/``submit``/``respond`` among ``tools``).

    ``tools`` are OpenAI function schemas. An environment whose tools differ per task (or change
    during an episode) hands them over by ``set_tools`` (``knowlyrcore.rollout.play_episodes``
    does), and ``reset`` goes back to the ones the policy was built with; with
    ``include_tools=False`` requests never carry tools and replies are still read with them.
    ``settings`` are ``ChatEndpoint``'s (``api``, ``api_key``, ``temperature``, ``max_tokens``,
    ``timeout``, ``max_retries``); ``max_tokens`` caps each reply (the Messages API requires a cap;
    the default leaves room for a tool call that writes a file).
    """

    role = "policy"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        system_prompt: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        include_tools: bool = True,
        closing_tool: str | None = None,
        **settings: Any,
    ):
        super().__init__(base_url, model, **settings)
        self.tools = self._built_tools = tools
        self.include_tools = include_tools
        self.closing_tool = closing_tool
        self.transcript = ChatTranscript(system_prompt)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The episode's conversation so far."""
        return self.transcript.messages

    def reset(self, task: Any = None) -> None:
        """Start a new episode (the task arrives as the first observation) with the tools it was built with."""
        self.transcript.reset()
        self.tools = self._built_tools

    def set_tools(self, tools: list[dict[str, Any]]) -> None:
        """The episode's environment offers ``tools`` (OpenAI schemas) from now on."""
        self.tools = list(tools)

    def __call__(self, observation: Any) -> dict[str, Any]:
        self.transcript.add_observation(observation)
        message = self.complete(self.transcript.messages, self.tools if self.include_tools else None)
        # arguments are a JSON string inside the reply: their escapes decode only here
        action = _valid_text(action_from_message(message, self.tools, closing_tool=self.closing_tool))
        self.transcript.add_reply(message, action)
        return action


# -- the wire formats ------------------------------------------------------------------------------


def _openai_headers(api_key: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _anthropic_headers(api_key: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "anthropic-version": ANTHROPIC_VERSION}
    if api_key:
        headers["x-api-key"] = api_key
    return headers


def _retry_after(value: str | None) -> float | None:
    """The seconds a ``Retry-After`` header asks for (capped), None when absent, a date or no number."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_WAIT) if math.isfinite(seconds) else None


def _assistant_message(content: Any, tool_calls: Any = None) -> dict[str, Any]:
    """An OpenAI-style assistant message from a reply's parts, checked: text content (a list of
    text parts is joined), a list of call objects."""
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    if content is not None and not isinstance(content, str):
        raise TypeError(f"the message content is {type(content).__name__}, not text")
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        if not isinstance(tool_calls, list):
            raise TypeError(f"tool_calls is {type(tool_calls).__name__}, not a list")
        message["tool_calls"] = [call for call in tool_calls if isinstance(call, Mapping)]
    return message


def _from_openai(payload: Any) -> dict[str, Any]:
    message = payload["choices"][0]["message"]
    if not isinstance(message, Mapping):
        raise TypeError(f"the message is {type(message).__name__}, not an object")
    reply = _assistant_message(message.get("content"), message.get("tool_calls"))
    if isinstance(message.get("function_call"), Mapping):  # the legacy single call
        reply["function_call"] = dict(message["function_call"])
    return reply


def _from_anthropic(payload: Any) -> dict[str, Any]:
    blocks = payload["content"]
    if not isinstance(blocks, list):
        raise TypeError(f"content is {type(blocks).__name__}, not a list of blocks")
    texts, calls = [], []
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "text":
            texts.append(block.get("text"))
        elif block.get("type") == "tool_use":
            given = block.get("input")
            # a string stands as the raw arguments, so action_from_message reports what is wrong with it
            arguments = given if isinstance(given, str) else json.dumps(given, ensure_ascii=False)
            function = {"name": block.get("name"), "arguments": arguments}
            calls.append({"id": block.get("id"), "type": "function", "function": function})
    if not all(isinstance(text, str) for text in texts):
        raise TypeError("a text block's text is not a string")
    return _assistant_message("".join(texts) if texts else None, calls)


def _anthropic_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function = tool.get("function", tool)
    schema = function.get("parameters") or {"type": "object", "properties": {}}
    return {"name": function["name"], "description": function.get("description") or "", "input_schema": schema}


def _to_anthropic(messages: Any) -> list[dict[str, Any]]:
    """OpenAI-style user, assistant and tool messages as Messages API turns.

    An assistant turn with no text and no call is left out: the API refuses empty content, and
    merges the user turns on either side of it into one.
    """
    turns: list[dict[str, Any]] = []
    for message in messages:
        role, content = message.get("role"), message.get("content")
        if role == "tool":
            result = {"type": "tool_result", "tool_use_id": message.get("tool_call_id"), "content": content or ""}
            turns.append({"role": "user", "content": [result]})
        elif role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except (TypeError, ValueError):
                    arguments = None
                # the API takes only an object: arguments that were not one were executed as {}
                given = arguments if isinstance(arguments, dict) else {}
                blocks.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"), "input": given})
            if blocks:
                turns.append({"role": "assistant", "content": blocks})
        else:
            turns.append({"role": "user", "content": content or ""})
    return turns
