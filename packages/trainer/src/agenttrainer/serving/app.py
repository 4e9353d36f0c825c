"""The OpenAI-compatible HTTP app (Starlette): ``/v1/chat/completions``, ``/v1/models``, ``/health``.

One model, one generation at a time: requests queue on an ``asyncio.Lock`` while generation
runs in a worker thread, so the event loop keeps answering ``/health`` and ``/v1/models``.
When the request carries ``tools``, ``<tool_call>`` blocks in the model's answer come back as
OpenAI ``tool_calls`` (``finish_reason: "tool_calls"``); when streaming, text that could be the
start of a block is held back until it is known not to be one.

Build it directly for tests or embedding:
    app = create_app(AgentInference.from_pretrained("smollm2-135m"), "smollm2-135m")
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agenttrainer.inference import AgentInference
from agenttrainer.models.tool_calls import parse_tool_calls, possible_tool_call_start
from agenttrainer.serving.protocol import (
    ChatRequest,
    RequestError,
    chunk_json,
    completion_json,
    new_completion_id,
    parse_chat_request,
    sse,
    tool_call_json,
    usage_json,
)


class ChatServer:
    """Request handlers bound to one ``AgentInference``."""

    def __init__(self, engine: AgentInference, model_name: str, *, default_max_tokens: int = 512) -> None:
        self.engine = engine
        self.model_name = model_name
        self.default_max_tokens = default_max_tokens
        self.created = int(time.time())
        self.context_length = getattr(engine.model.config, "max_position_embeddings", None)
        self.lock = asyncio.Lock()

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": self.model_name})

    def _model_card(self) -> dict[str, Any]:
        return {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "knowlyr"}

    async def list_models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [self._model_card()]})

    async def get_model(self, request: Request) -> Response:
        if request.path_params["model"] != self.model_name:
            error = RequestError(
                f"model {request.path_params['model']!r} is not served here",
                param="model",
                status=404,
                code="model_not_found",
            )
            return JSONResponse(error.body(), status_code=404)
        return JSONResponse(self._model_card())

    def _budget(self, chat: ChatRequest) -> int:
        """max_new_tokens for this request; refuses prompts that do not fit the context."""
        try:
            prompt_tokens = self.engine.encode(chat.messages, chat.tools).shape[1]
        except Exception as exc:  # the chat template rejected the conversation (e.g. bad roles order)
            raise RequestError(f"cannot render messages with the chat template: {exc}", param="messages") from None
        wanted = chat.max_tokens or self.default_max_tokens
        if self.context_length is None:
            return wanted
        room = self.context_length - prompt_tokens
        if room < 1:
            raise RequestError(
                f"the prompt has {prompt_tokens} tokens; the model's context is {self.context_length}",
                param="messages",
                code="context_length_exceeded",
            )
        return min(wanted, room)

    async def chat_completions(self, request: Request) -> Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return JSONResponse(RequestError("the request body is not valid JSON").body(), status_code=400)
        try:
            chat = parse_chat_request(body, self.model_name)
            max_new_tokens = await run_in_threadpool(self._budget, chat)
        except RequestError as error:
            return JSONResponse(error.body(), status_code=error.status)
        options = {
            "max_new_tokens": max_new_tokens,
            "temperature": chat.temperature,
            "top_p": chat.top_p,
            "stop": chat.stop,
            "seed": chat.seed,
        }
        if chat.stream:
            return StreamingResponse(
                self._stream(chat, options), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
            )
        async with self.lock:
            completion = await run_in_threadpool(self.engine.complete, chat.messages, chat.tools, **options)
        content, calls = parse_tool_calls(completion.text) if chat.tools else (completion.text, [])
        return JSONResponse(completion_json(new_completion_id(), self.model_name, completion, content, calls))

    async def _stream(self, chat: ChatRequest, options: dict[str, Any]) -> AsyncIterator[str]:
        completion_id, model = new_completion_id(), self.model_name
        async with self.lock:
            stream = self.engine.stream(chat.messages, chat.tools, **options)
            try:
                yield sse(chunk_json(completion_id, model, {"role": "assistant", "content": ""}))
                pieces = iter(stream)
                text, emitted = "", 0
                while (piece := await run_in_threadpool(next, pieces, None)) is not None:
                    text += piece
                    safe = possible_tool_call_start(text) if chat.tools else len(text)
                    if safe > emitted:
                        yield sse(chunk_json(completion_id, model, {"content": text[emitted:safe]}))
                        emitted = safe
                rest, calls = parse_tool_calls(text[emitted:]) if chat.tools else (text[emitted:], [])
                if calls and rest:
                    rest = "\n" + rest  # text after the calls; the held-back part started at a block
                if rest:
                    yield sse(chunk_json(completion_id, model, {"content": rest}))
                if calls:
                    deltas = [tool_call_json(call, index=i) for i, call in enumerate(calls)]
                    yield sse(chunk_json(completion_id, model, {"tool_calls": deltas}))
                completion = stream.completion
                finish = "tool_calls" if calls else completion.finish_reason
                yield sse(chunk_json(completion_id, model, {}, finish_reason=finish))
                if chat.include_usage:
                    yield sse(chunk_json(completion_id, model, None, usage=usage_json(completion)))
                yield sse("[DONE]")
            finally:
                stream.close()  # a client that disconnects mid-stream stops generation


def create_app(engine: AgentInference, model_name: str, *, default_max_tokens: int = 512) -> Starlette:
    """The ASGI app serving ``engine`` under ``model_name``."""
    server = ChatServer(engine, model_name, default_max_tokens=default_max_tokens)
    routes = [
        Route("/health", server.health),
        Route("/v1/models", server.list_models),
        Route("/v1/models/{model:path}", server.get_model),
        Route("/v1/chat/completions", server.chat_completions, methods=["POST"]),
    ]
    return Starlette(routes=routes)
