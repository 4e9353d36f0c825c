"""What bounds ``knowlyr-trainer serve``: the API key, request caps, the generation queue, and
the cancellation of generations whose client went away.

* ``RequireAPIKey``: ASGI middleware; every route but ``/health`` needs ``Authorization: Bearer KEY``
  (compared in constant time), else 401 with an OpenAI-style error body.
* ``read_json_body``: the body is refused (413) past ``max_body_bytes`` before it is parsed, and a
  body nested deeper than ``max_json_depth`` is a 400, never a ``RecursionError`` (500).
* ``plan_micro_batches``: a ``/v1/completions`` batch is sampled in micro-batches of at most
  ``max_batch_tokens`` padded tokens, so the memory of one generation is bounded whatever the
  request (which is capped in all at ``max_request_tokens``).
* ``GenerationSlots``: at most ``max_concurrent`` generations run and ``max_queue`` wait; more are
  refused with 429 and ``Retry-After``.
* ``Cancellation``: a forward pre-hook on the served model counts forward passes and raises
  ``GenerationCancelled`` in a worker thread whose request was cancelled, so a generation stops
  between two tokens, whatever loop (``generate``, a batched sampler) drives the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from agenttrainer.serving.protocol import RequestError

if TYPE_CHECKING:  # Starlette is the serve extra: ``serving.cli`` imports this module without it
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.types import ASGIApp, Receive, Scope, Send

API_KEY_ENV = "KNOWLYR_SERVE_API_KEY"
OPEN_PATHS = frozenset({"/health"})  # readiness probes need no key; it reveals only the model name
RETRY_AFTER_SECONDS = 1
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a request whose client left; nobody reads it
DISCONNECT_POLL_SECONDS = 0.1

T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    """Caps on one request and on the server's load; every field is a ``serve`` flag."""

    max_body_bytes: int = 8 * 1024 * 1024  # a batch of online-RL prompts as token ids fits
    max_json_depth: int = 64  # deep enough for any real tool schema, far below Python's recursion limit
    max_tools_bytes: int = 256 * 1024  # the request's ``tools`` as JSON
    max_prompt_tokens: int | None = None  # None: the model's context length
    max_tokens_limit: int = 4096  # a larger ``max_tokens`` is refused (400), never clamped
    # /v1/completions: prompt tokens + max_tokens for each prompt, over the whole request (413 above)
    max_request_tokens: int = 262144
    # One generate call: rows x (longest prompt + max_tokens). Memory grows with it (KV cache, and a
    # vocabulary-wide row of logits per sampled token); SmolLM2's whole context (8192) fits one row.
    max_batch_tokens: int = 16384
    max_concurrent: int = 1
    max_queue: int = 16


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # another host name: it may resolve to a public interface


def error_response(error: RequestError) -> JSONResponse:
    """The OpenAI-style error body; a busy server says when to retry."""
    from starlette.responses import JSONResponse

    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if error.status in (429, 503) else None
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


class RequireAPIKey:
    """ASGI middleware: refuse (401) any request but ``OPEN_PATHS`` without ``Authorization: Bearer <key>``."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._key = api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from starlette.datastructures import Headers
        from starlette.responses import JSONResponse

        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        scheme, _, token = Headers(scope=scope).get("authorization", "").partition(" ")
        # Headers are latin-1 decoded: re-encoding gives the bytes the client sent.
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode("latin-1"), self._key):
            await self.app(scope, receive, send)
            return
        error = RequestError(
            "missing or invalid API key: send 'Authorization: Bearer <key>'", status=401, code="invalid_api_key"
        )
        response = JSONResponse(error.body(), status_code=401, headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


async def read_json_body(request: Request, limits: Limits) -> Any:
    """The request's JSON body; 413 past ``max_body_bytes`` (unread), 400 when malformed or too deep."""
    from starlette.requests import ClientDisconnect

    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limits.max_body_bytes:
        raise _too_large(limits)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise _too_large(limits)
            chunks.append(chunk)
    except ClientDisconnect:
        raise RequestError("the client left before sending the whole body", status=CLIENT_CLOSED_REQUEST) from None
    try:
        body = json.loads(b"".join(chunks), parse_constant=_refuse_constant)
    except RecursionError:
        raise _too_deep(limits) from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, NaN, a 5000-digit integer
        raise RequestError(f"the request body is not valid JSON: {exc}") from None
    if json_depth(body) > limits.max_json_depth:
        raise _too_deep(limits)
    return body


def json_depth(value: Any) -> int:
    """How deeply lists and objects nest in ``value`` (a scalar is 0, ``[]`` is 1); no recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _too_large(limits: Limits) -> RequestError:
    return RequestError(
        f"the request body is larger than {limits.max_body_bytes} bytes (serve --max-body-bytes)",
        status=413,
        code="request_too_large",
    )


def _too_deep(limits: Limits) -> RequestError:
    return RequestError(
        f"the request body nests deeper than {limits.max_json_depth} levels (serve --max-json-depth)",
        code="json_too_deep",
    )


def plan_micro_batches(lengths: Sequence[int], max_new_tokens: int, max_batch_tokens: int) -> list[list[int]]:
    """Prompt indices grouped into micro-batches of at most ``max_batch_tokens`` padded tokens each.

    A micro-batch of ``rows`` prompts, ``width`` tokens the longest, holds ``rows * (width +
    max_new_tokens)`` tokens (its KV cache; the shorter prompts are padded to ``width``). Prompts
    go longest first, so each micro-batch holds prompts of similar length, and each is filled
    while the next prompt still fits. A prompt too long for a micro-batch of its own gets one
    anyway: callers refuse such prompts first.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * (lengths[batches[-1][0]] + max_new_tokens) <= max_batch_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


class GenerationSlots:
    """At most ``running`` generations at once and ``waiting`` queued behind them; past that,
    ``slot()`` raises a 429 ``RequestError`` at once instead of queueing."""

    def __init__(self, running: int, waiting: int) -> None:
        self.capacity, self.max_waiting = running, waiting
        self.running = self.waiting = 0
        self._free = asyncio.Semaphore(running)
        self._exclusive = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self.running + self.waiting >= self.capacity + self.max_waiting:
            raise RequestError(
                f"the server is busy ({self.running} generations running, {self.waiting} waiting); retry later",
                status=429,
                code="server_busy",
            )
        self.waiting += 1
        try:
            await self._free.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            self._free.release()

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Every slot at once: no generation runs inside (weights change there)."""
        held = 0
        try:
            async with self._exclusive:
                for _ in range(self.capacity):
                    await self._free.acquire()
                    held += 1
            yield
        finally:
            for _ in range(held):
                self._free.release()


class GenerationCancelled(Exception):
    """Raised inside the model's forward pass when the request it serves was cancelled."""


class Cancellation:
    """Stops generations of cancelled requests between two forward passes of ``model``.

    ``run(event, fn, ...)`` runs ``fn`` in the calling (worker) thread; every forward pass that
    thread makes checks ``event`` first. Threads not started through ``run`` (e.g. a
    ``TextStream``'s own) are only counted: streams stop through ``TextStream.close``.
    """

    def __init__(self, model: Any) -> None:
        self.forward_passes = 0
        self.cancelled = 0  # generations stopped because their client went away
        self._events: dict[int, threading.Event] = {}
        model.register_forward_pre_hook(self._before_forward)

    def _before_forward(self, module: Any, args: Any) -> None:
        self.forward_passes += 1
        event = self._events.get(threading.get_ident())
        if event is not None and event.is_set():
            raise GenerationCancelled

    def run(self, event: threading.Event, fn: Callable[..., T], *args: Any) -> T:
        thread = threading.get_ident()
        self._events[thread] = event
        try:
            return fn(*args)
        except GenerationCancelled:
            self.cancelled += 1
            raise
        finally:
            del self._events[thread]


async def set_when_disconnected(request: Request, event: threading.Event) -> None:
    """Set ``event`` once the client of ``request`` disconnects (run it as a task; cancel it when done)."""
    while not await request.is_disconnected():
        await asyncio.sleep(DISCONNECT_POLL_SECONDS)
    event.set()
