"""The OpenAI-compatible HTTP app (Starlette): ``/v1/chat/completions``, ``/v1/completions``,
``/v1/models``, ``/health`` and, when enabled, ``/v1/load_weights``.

Generation runs in worker threads, so the event loop keeps answering ``/health`` and
``/v1/models``; at most ``max_concurrent`` generations run (one by default) and ``max_queue``
wait, more get 429. A generation stops between two tokens once its client disconnects, streaming
or not. Bodies, prompts, ``max_tokens``, JSON nesting and tool schemas are capped, and an API key
can be required (``serving.limits``). ``GET /metrics`` counts running, waiting and cancelled
generations, the model's forward passes and the micro-batches of ``/v1/completions``.
When the request carries ``tools``, ``<tool_call>`` blocks in the model's answer come back as
OpenAI ``tool_calls`` (``finish_reason: "tool_calls"``); when streaming, text that could be the
start of a block is held back until it is known not to be one.

``/v1/completions`` makes the server a token-in / token-out backend for online RL, speaking vLLM's
fields so ``agenttrainer.acting.ServerGenerator`` drives it unchanged: prompts as token ids,
the prompts of a request sampled in batched ``LocalGenerator`` calls of at most
``max_batch_tokens`` padded tokens each (a request holds at most ``max_request_tokens``), and the
sampled ``token_ids`` with their log-probs in the answer. ``/v1/load_weights`` (off unless
``allow_weight_updates``: it reads any directory a client names) swaps in the weights the trainer
just saved, a full checkpoint or a LoRA adapter, between two generations, once every tensor is
checked (names, shapes, no NaN or inf).

Both endpoints generate through one acting engine (``agenttrainer.acting.engine``, the served
``AgentInference``'s ``acting_engine``), as every local policy acts: it keeps the last request's
keys and values, so a request sharing a prefix with it (a judge's next verdict under the same
system prompt and rubric, an agent's next turn) prefills only what follows that prefix. Loading
weights drops that cache.

Build it directly for tests or embedding:
    app = create_app(AgentInference.from_pretrained("smollm2-135m"), "smollm2-135m")
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import torch
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from agenttrainer.acting.generators import LocalGenerator, TokenSample
from agenttrainer.acting.inference import AgentInference, TextStream, seeded
from agenttrainer.models.prompt_contract import contract_of
from agenttrainer.serving.limits import (
    CLIENT_CLOSED_REQUEST,
    Cancellation,
    GenerationCancelled,
    GenerationSlots,
    Limits,
    RequireAPIKey,
    error_response,
    plan_micro_batches,
    read_json_body,
    set_when_disconnected,
)
from agenttrainer.serving.protocol import (
    ChatRequest,
    CompletionRequest,
    PromptCaps,
    RequestError,
    chunk_json,
    completion_json,
    logprobs_json,
    new_completion_id,
    parse_chat_request,
    parse_completion_request,
    parse_load_weights_request,
    prompt_too_long,
    sse,
    text_choice_json,
    text_completion_json,
    tool_call_json,
    usage_json,
)
from knowlyrcore.errors import MissingExtraError, require_extra
from knowlyrcore.tool_parsing import parse_tool_calls, possible_tool_call_start

ADAPTER_NAME = "default"  # one adapter at a time: a new one replaces it
FALLBACK_MAX_PROMPT_TOKENS = 32768  # when neither --max-prompt-tokens nor the model's config says

T = TypeVar("T")


class ChatServer:
    """Request handlers bound to one ``AgentInference``.

    Loaded weights change ``engine.model`` in place (tensors copied into it, LoRA layers injected
    into it), so the chat endpoint, the token endpoint and the generator's cached prefix all see
    one model, and nothing holds a stale reference. The two endpoints also share one acting engine
    (``engine.acting_engine``; ``/v1/completions`` through ``self.generator``) and its KV cache.
    """

    def __init__(
        self,
        engine: AgentInference,
        model_name: str,
        *,
        default_max_tokens: int = 512,
        allow_weight_updates: bool = False,
        limits: Limits | None = None,
    ) -> None:
        self.engine = engine
        self.model_name = model_name
        self.limits = limits or Limits()
        if default_max_tokens > self.limits.max_tokens_limit:
            raise ValueError(
                f"default_max_tokens ({default_max_tokens}) is above max_tokens_limit ({self.limits.max_tokens_limit})"
            )
        self.default_max_tokens = default_max_tokens
        self.allow_weight_updates = allow_weight_updates
        self.created = int(time.time())
        self.context_length = getattr(engine.model.config, "max_position_embeddings", None)
        self.vocab_size = engine.model.get_input_embeddings().weight.shape[0]
        max_prompt_tokens = self.limits.max_prompt_tokens or self.context_length or FALLBACK_MAX_PROMPT_TOKENS
        # No token is longer than the vocabulary's longest entry (in bytes, for byte-level BPE, so
        # in characters too): a text of more characters than this cap has more tokens than allowed.
        longest_token = max(len(token) for token in engine.tokenizer.get_vocab())
        self.prompt_caps = PromptCaps(
            max_tokens=max_prompt_tokens,
            max_chars=max_prompt_tokens * longest_token,
            is_context=max_prompt_tokens == self.context_length,
        )
        self.slots = GenerationSlots(self.limits.max_concurrent, self.limits.max_queue)
        self.cancellation = Cancellation(engine.model)
        # The chat endpoint's engine (None: AgentInference(reuse_cache=False) generates with
        # model.generate, and the generator builds its own), and the lock that guards its cache:
        # chat answers take it inside AgentInference, /v1/completions here.
        self.generator = LocalGenerator(engine.model, engine.tokenizer, engine=engine.acting_engine)
        self._generator_lock = engine.acting_lock
        self.weights_version = 0  # successful /v1/load_weights calls
        self.micro_batches = 0  # generate calls made for /v1/completions
        self.largest_micro_batch_tokens = 0  # padded tokens (rows x (longest prompt + max_tokens)) of the largest
        self._adapter: Any = None  # the peft wrapper of the loaded LoRA adapter
        # The served weights' names, shapes and dtypes, taken before any adapter renames modules; a
        # checkpoint must match them. Tied weights (one tensor, several names) need one name only.
        state = engine.model.state_dict(keep_vars=True)
        self._weight_shapes = {name: tuple(tensor.shape) for name, tensor in state.items()}
        self._weight_dtypes = {name: tensor.dtype for name, tensor in state.items()}
        names_of: dict[int, list[str]] = {}
        for name, tensor in state.items():
            names_of.setdefault(id(tensor), []).append(name)
        self._weight_groups = list(names_of.values())

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": self.model_name})

    async def metrics(self, request: Request) -> Response:
        return JSONResponse(
            {
                "generations_running": self.slots.running,
                "generations_waiting": self.slots.waiting,
                "generations_cancelled": self.cancellation.cancelled,
                "model_forward_passes": self.cancellation.forward_passes,
                "completion_micro_batches": self.micro_batches,
                "largest_micro_batch_tokens": self.largest_micro_batch_tokens,
            }
        )

    def _model_card(self) -> dict[str, Any]:
        card = {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "knowlyr"}
        contract = contract_of(self.engine.model)
        if contract is not None:  # how the checkpoint was trained to be prompted (clients may ignore it)
            card["prompt_contract"] = contract.to_dict()
        return card

    def _with_trained_system_prompt(self, chat: ChatRequest) -> None:
        """A chat without a system message gets the checkpoint's trained system prompt, if it has one
        (a request's own system message always wins)."""
        contract = contract_of(self.engine.model)
        if contract and contract.system_prompt and not any(m.get("role") == "system" for m in chat.messages):
            chat.messages = [{"role": "system", "content": contract.system_prompt}, *chat.messages]

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
        """max_new_tokens for this request; refuses prompts past the cap or the context.

        The characters are counted first: a text too long for the cap is refused before the chat
        template and the tokenizer spend time on it.
        """
        chars = sum(len(m["content"] or "") for m in chat.messages)
        chars += sum(len(json.dumps(m["tool_calls"])) for m in chat.messages if "tool_calls" in m)
        chars += len(json.dumps(chat.tools)) if chat.tools else 0
        if chars > self.prompt_caps.max_chars:
            raise prompt_too_long("messages", f"{chars} characters", self.prompt_caps)
        try:
            prompt_tokens = self.engine.encode(chat.messages, chat.tools).shape[1]
        except Exception as exc:  # the chat template rejected the conversation (e.g. bad roles order)
            raise RequestError(f"cannot render messages with the chat template: {exc}", param="messages") from None
        if prompt_tokens > self.prompt_caps.max_tokens:
            raise prompt_too_long("messages", f"{prompt_tokens} tokens", self.prompt_caps)
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
            body = await read_json_body(request, self.limits)
            chat = parse_chat_request(
                body,
                self.model_name,
                max_tokens_limit=self.limits.max_tokens_limit,
                max_tools_bytes=self.limits.max_tools_bytes,
                default_max_tokens=self.default_max_tokens,
            )
            self._with_trained_system_prompt(chat)
            max_new_tokens = await run_in_threadpool(self._budget, chat)
            options = {
                "max_new_tokens": max_new_tokens,
                "temperature": chat.temperature,
                "top_p": chat.top_p,
                "stop": chat.stop,
                "seed": chat.seed,
            }
            if chat.top_logprobs is not None:  # never with stream (refused above)
                options["top_logprobs"] = chat.top_logprobs
            if chat.stream:
                return await self._stream_response(request, chat, options)
            complete = functools.partial(self.engine.complete, chat.messages, chat.tools, **options)
            completion = await self._generate(request, complete)
        except RequestError as error:
            return error_response(error)
        except GenerationCancelled:
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        content, calls = parse_tool_calls(completion.text) if chat.tools else (completion.text, [])
        logprobs = None
        if completion.logprobs is not None:
            shown = (t for token, _, top in completion.logprobs for t in (token, *(alt for alt, _ in top)))
            logprobs = logprobs_json(completion.logprobs, self._token_texts(shown).__getitem__)
        return JSONResponse(completion_json(new_completion_id(), self.model_name, completion, content, calls, logprobs))

    async def _generate(self, request: Request, generate: Callable[[], T]) -> T:
        """``generate()`` in a worker thread once a slot is free (429 when the queue is full); it
        stops between two forward passes with ``GenerationCancelled`` if the client disconnects.

        The slot is held until the thread has returned, so a cancelled generation never overlaps
        the next one.
        """
        cancel = threading.Event()
        async with self.slots.slot():
            watcher = asyncio.ensure_future(set_when_disconnected(request, cancel))
            try:
                return await anyio.to_thread.run_sync(self.cancellation.run, cancel, generate)
            finally:
                watcher.cancel()

    async def _stream_response(self, request: Request, chat: ChatRequest, options: dict[str, Any]) -> Response:
        """Start a stream once a slot is free; the response closes it and frees the slot, however it ends."""
        cleanup = contextlib.AsyncExitStack()
        await cleanup.enter_async_context(self.slots.slot())
        try:
            start = functools.partial(self.engine.stream, chat.messages, chat.tools, **options)
            stream = await run_in_threadpool(start)
        except BaseException:
            await cleanup.aclose()
            raise
        pieces = iter(stream)
        disconnected = threading.Event()
        # The stream may hold text back (a possible tool call or stop string) and send nothing for
        # a while, so the client's disconnect is watched rather than waited for at the next send.
        watcher = asyncio.ensure_future(self._close_on_disconnect(request, stream, disconnected))
        cleanup.push_async_callback(self._end_stream, request, stream, pieces, watcher, disconnected)
        return _SSEResponse(self._events(chat, stream, pieces), cleanup.aclose)

    async def _close_on_disconnect(self, request: Request, stream: TextStream, disconnected: threading.Event) -> None:
        await set_when_disconnected(request, disconnected)
        stream.close()

    async def _end_stream(
        self,
        request: Request,
        stream: TextStream,
        pieces: Any,
        watcher: asyncio.Future[None],
        disconnected: threading.Event,
    ) -> None:
        """Stop the generation (a no-op once it ended) and wait for its thread, before the slot is freed.

        The client left if the watcher saw it go (and closed the stream), or if the events were cut
        short (Starlette cancels them when it sees the disconnect first).
        """
        watcher.cancel()
        cut_short = stream.completion is None
        if cut_short:
            stream.close()
            await anyio.to_thread.run_sync(_drain, pieces)
        if disconnected.is_set() or (cut_short and await request.is_disconnected()):
            self.cancellation.cancelled += 1

    async def _events(self, chat: ChatRequest, stream: TextStream, pieces: Any) -> AsyncIterator[str]:
        completion_id, model = new_completion_id(), self.model_name
        yield sse(chunk_json(completion_id, model, {"role": "assistant", "content": ""}))
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

    # -- token in / token out (/v1/completions) ----------------------------------------------

    async def completions(self, request: Request) -> Response:
        try:
            body = await read_json_body(request, self.limits)
            completion = await run_in_threadpool(
                functools.partial(
                    parse_completion_request,
                    body,
                    self.model_name,
                    vocab_size=self.vocab_size,
                    tokenize=self._tokenize,
                    caps=self.prompt_caps,
                    max_tokens_limit=self.limits.max_tokens_limit,
                )
            )
            max_new_tokens = self._completion_budget(completion)
            sample = functools.partial(self._complete_tokens, completion, max_new_tokens)
            choices, completion_tokens = await self._generate(request, sample)
        except RequestError as error:
            return error_response(error)
        except GenerationCancelled:
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        prompt_tokens = sum(len(p) for p in completion.prompts)
        completion_id = new_completion_id("cmpl-")
        return JSONResponse(
            text_completion_json(completion_id, self.model_name, choices, prompt_tokens, completion_tokens)
        )

    def _tokenize(self, text: str) -> list[int]:
        """A string prompt's ids: plain tokenization with the tokenizer's special tokens (as vLLM), no chat template."""
        return self.engine.tokenizer(text)["input_ids"]

    def _completion_budget(self, completion: CompletionRequest) -> int:
        """max_new_tokens for the request; refuses prompts that do not fit the context, a request
        past ``max_request_tokens`` (413) and a prompt too long for a micro-batch of its own.

        Every prompt is sampled with one ``max_new_tokens``, so it is clipped to the room the
        longest prompt leaves.
        """
        longest = max(range(len(completion.prompts)), key=lambda i: len(completion.prompts[i]))
        longest_tokens = len(completion.prompts[longest])
        max_new_tokens = completion.max_tokens or self.default_max_tokens
        if self.context_length is not None:
            room = self.context_length - longest_tokens
            if room < 1:
                raise RequestError(
                    f"{completion.param(longest)} has {longest_tokens} tokens; "
                    f"the model's context is {self.context_length}",
                    param=completion.param(longest),
                    code="context_length_exceeded",
                )
            max_new_tokens = min(max_new_tokens, room)
        prompt_tokens = sum(len(p) for p in completion.prompts)
        total = prompt_tokens + len(completion.prompts) * max_new_tokens
        if total > self.limits.max_request_tokens:
            raise RequestError(
                f"the request needs {total} tokens ({prompt_tokens} in its {len(completion.prompts)} prompts "
                f"+ {max_new_tokens} max_tokens for each); this server takes up to "
                f"{self.limits.max_request_tokens} per request (serve --max-request-tokens)",
                param="prompt",
                status=413,
                code="request_tokens_exceeded",
            )
        if longest_tokens + max_new_tokens > self.limits.max_batch_tokens:
            raise RequestError(
                f"{completion.param(longest)} has {longest_tokens} tokens, which with max_tokens={max_new_tokens} "
                f"need {longest_tokens + max_new_tokens}; one generation batch holds up to "
                f"{self.limits.max_batch_tokens} (serve --max-batch-tokens)",
                param=completion.param(longest),
                code="batch_tokens_exceeded",
            )
        return max_new_tokens

    def _complete_tokens(self, completion: CompletionRequest, max_new_tokens: int) -> tuple[list[dict[str, Any]], int]:
        """Sample every prompt, in micro-batches of at most ``max_batch_tokens`` padded tokens (so
        memory does not grow with the request); the choices and how many tokens they hold."""
        lengths = [len(prompt) for prompt in completion.prompts]
        samples: dict[int, TokenSample] = {}  # by prompt index
        with self._generator_lock, seeded(completion.seed):
            for batch in plan_micro_batches(lengths, max_new_tokens, self.limits.max_batch_tokens):
                self.micro_batches += 1
                tokens = len(batch) * (lengths[batch[0]] + max_new_tokens)  # the longest prompt comes first
                self.largest_micro_batch_tokens = max(self.largest_micro_batch_tokens, tokens)
                batch_samples = self.generator.generate(
                    [completion.prompts[i] for i in batch],
                    max_new_tokens=max_new_tokens,
                    temperature=completion.temperature,
                    top_p=completion.top_p,
                )
                samples.update(zip(batch, batch_samples))
        choices = [self._text_choice(i, completion, prompt, samples[i]) for i, prompt in enumerate(completion.prompts)]
        return choices, sum(len(sample.token_ids) for sample in samples.values())

    def _token_texts(self, ids: Iterable[int]) -> dict[int, str]:
        """Each token decoded alone, special tokens kept (vLLM's logprobs tokens): a character
        split across tokens shows as U+FFFD in each part."""
        unique = list(dict.fromkeys(ids))
        texts = self.engine.tokenizer.batch_decode([[t] for t in unique], clean_up_tokenization_spaces=False)
        return dict(zip(unique, texts))

    def _text_choice(
        self, index: int, completion: CompletionRequest, prompt: list[int], sample: TokenSample
    ) -> dict[str, Any]:
        tokenizer = self.engine.tokenizer
        # The end-of-turn token that stopped generation is in token_ids but not in the text (as in
        # vLLM and OpenAI, where the stop never is part of the answer).
        answer = sample.token_ids[:-1] if sample.finish_reason == "stop" else sample.token_ids
        text = tokenizer.decode(answer, skip_special_tokens=completion.skip_special_tokens)
        tokens = None
        if completion.logprobs:
            texts = self._token_texts(sample.token_ids)
            tokens = [texts[t] for t in sample.token_ids]
        return text_choice_json(
            index, text, sample, prompt, tokens=tokens, return_token_ids=completion.return_token_ids
        )

    # -- weight updates (/v1/load_weights) --------------------------------------------------

    async def load_weights(self, request: Request) -> Response:
        if not self.allow_weight_updates:
            error = RequestError(
                "weight updates are disabled: this endpoint loads weights from a directory on the server's disk; "
                "start the server with --allow-weight-updates to enable it",
                status=403,
                code="weight_updates_disabled",
            )
            return JSONResponse(error.body(), status_code=error.status)
        try:
            path = parse_load_weights_request(await read_json_body(request, self.limits))
            async with self.slots.exclusive():  # no generation runs while tensors change
                await run_in_threadpool(self._load_weights, Path(path))
                self.weights_version += 1
                version = self.weights_version
        except RequestError as error:
            return error_response(error)
        return JSONResponse({"status": "ok", "path": path, "version": version})

    def _load_weights(self, directory: Path) -> None:
        """Load a LoRA adapter dir (``adapter_config.json``) or a full checkpoint into the served model."""
        if not directory.is_dir():
            raise RequestError(f"path {str(directory)!r} is not a directory on the server", param="path")
        try:
            if (directory / "adapter_config.json").is_file():
                self._load_adapter(directory)
            else:
                self._load_checkpoint(directory)
        finally:
            # cached keys and values may belong to other weights now: the chat endpoint's engine
            # and the generator's (one object unless the chat path has none)
            self.engine.weights_updated()
            self.generator.weights_updated()
            self.engine.model.eval()  # peft may leave modules in training mode (dropout)

    def _load_checkpoint(self, directory: Path) -> None:
        """Copy a ``save_model`` checkpoint's tensors into the served model, after checking them all
        (names, shapes, finite values): a refused checkpoint leaves the served weights as they were.

        Each file is opened once and read from that handle for both the checks and the copy, so a
        trainer replacing the directory's files meanwhile cannot slip in tensors that were not checked.
        """
        from safetensors import SafetensorError, safe_open

        files = _checkpoint_files(directory)
        with contextlib.ExitStack() as stack:
            handles = {}
            for file in files:
                try:
                    handles[file] = stack.enter_context(safe_open(str(file), framework="pt"))
                except (OSError, SafetensorError) as exc:
                    raise RequestError(f"cannot read {file}: {_first_line(exc)}", param="path") from None
            found = {key: (file, handle) for file, handle in handles.items() for key in handle.keys()}  # noqa: SIM118
            self._check_checkpoint(directory, {key: (f, h.get_slice(key).get_shape()) for key, (f, h) in found.items()})
            for key in sorted(found):  # one tensor at a time: no second copy of the model in memory
                file, handle = found[key]
                _refuse_non_finite(file, key, handle.get_tensor(key), served_dtype=self._weight_dtypes[key])
            if self._adapter is not None:  # the checkpoint is the whole model; an adapter on top would apply twice
                self._adapter.unload()
                self._adapter = None
            target = self.engine.model.state_dict()
            try:
                with torch.no_grad():
                    for key, (_, handle) in found.items():
                        target[key].copy_(handle.get_tensor(key))
            except Exception as exc:
                raise RequestError(
                    f"loading {directory} failed part way ({_first_line(exc)}); the served weights are now mixed: "
                    "load a complete checkpoint again",
                    status=500,
                    code="weights_partially_loaded",
                ) from None

    def _check_checkpoint(self, directory: Path, found: dict[str, tuple[Path, list[int]]]) -> None:
        """Every tensor must be a served weight of the same shape, and every served weight present."""
        for key in sorted(found):
            file, shape = found[key]
            if key not in self._weight_shapes:
                raise RequestError(
                    f"{file}: {key!r} is not a weight of the served model (a different architecture?)",
                    param="path",
                    code="weights_mismatch",
                )
            if tuple(shape) != self._weight_shapes[key]:
                raise RequestError(
                    f"{file}: {key!r} has shape {list(shape)}, the served model's is {list(self._weight_shapes[key])}",
                    param="path",
                    code="weights_mismatch",
                )
        for names in self._weight_groups:
            if not any(name in found for name in names):
                raise RequestError(f"{directory}: {names[0]!r} is missing", param="path", code="weights_mismatch")

    def _load_adapter(self, directory: Path) -> None:
        """Put the LoRA adapter in ``directory`` on the served model in place of the previous one.

        If the new adapter does not fit, the previous one (kept in memory) goes back on, so a bad
        request never leaves the server sampling from the bare base model.
        """
        try:
            peft = require_extra("peft", "knowlyr-trainer", "peft", f"the LoRA adapter in {directory}")
        except MissingExtraError as exc:  # the server lacks it, not the request: 501
            raise RequestError(str(exc), status=501, code="peft_not_installed") from None
        try:
            config = peft.PeftConfig.from_pretrained(str(directory))
        except Exception as exc:
            raise RequestError(f"{directory}/adapter_config.json: {_first_line(exc)}", param="path") from None
        if config.peft_type != peft.PeftType.LORA:
            # Other adapter kinds (prompt tuning, ...) act in PeftModel.forward, which generation here never calls.
            raise RequestError(f"{directory} holds a {config.peft_type} adapter; only LoRA is supported", param="path")
        weights = directory / "adapter_model.safetensors"
        if not weights.is_file():
            raise RequestError(f"{directory} has adapter_config.json but no adapter_model.safetensors", param="path")
        # Read and checked before the previous adapter comes off, and attached from this very state.
        state = _read_safetensors(weights)
        for key, tensor in state.items():
            _refuse_non_finite(weights, key, tensor)
        previous = None
        if self._adapter is not None:
            previous = (self._adapter.peft_config[ADAPTER_NAME], peft.get_peft_model_state_dict(self._adapter))
            self._adapter.unload()
            self._adapter = None
        try:
            self._adapter = self._attach_adapter(peft, config, state)
        except Exception as exc:
            if previous is not None:
                self._adapter = self._attach_adapter(peft, *previous)
            raise RequestError(
                f"cannot load the LoRA adapter in {directory} onto the served model: {_first_line(exc)}",
                param="path",
                code="weights_mismatch",
            ) from None

    def _attach_adapter(self, peft: Any, config: Any, state: dict[str, Any]) -> Any:
        """Inject LoRA layers into ``engine.model`` and fill them from ``state`` (an adapter's tensors).

        The wrapper is kept only to ``unload`` the layers later: generation calls ``engine.model``
        itself, whose modules now apply the adapter.
        """
        config = copy.copy(config)
        config.inference_mode = True
        wrapper = peft.get_peft_model(self.engine.model, config, adapter_name=ADAPTER_NAME)
        try:
            peft.set_peft_model_state_dict(wrapper, state, adapter_name=ADAPTER_NAME)
        except BaseException:
            wrapper.unload()
            raise
        return wrapper


class _SSEResponse(StreamingResponse):
    """Server-sent events that run ``cleanup`` once the response is over, however it ends (a
    client gone before the first byte included, when the events never start)."""

    def __init__(self, events: AsyncIterator[str], cleanup: Callable[[], Awaitable[Any]]) -> None:
        super().__init__(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self._cleanup = cleanup

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._cleanup()


def _drain(pieces: Any) -> None:
    """Consume a closed stream's remaining pieces: returns once its generation thread has ended."""
    with contextlib.suppress(Exception):
        for _ in pieces:
            pass


def _checkpoint_files(directory: Path) -> list[Path]:
    """The safetensors files of a ``save_model`` checkpoint (one file, or the shards its index names)."""
    index = directory / "model.safetensors.index.json"
    if (directory / "config.json").is_file() and index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, AttributeError) as exc:
            raise RequestError(f"cannot read {index}: {_first_line(exc)}", param="path") from None
        return [directory / shard for shard in shards]
    if (directory / "config.json").is_file() and (directory / "model.safetensors").is_file():
        return [directory / "model.safetensors"]
    raise RequestError(
        f"{directory} holds neither a checkpoint (config.json + model.safetensors, as save_model writes) "
        "nor a LoRA adapter (adapter_config.json + adapter_model.safetensors)",
        param="path",
    )


def _read_safetensors(file: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file; a 400 naming the file when it cannot be read."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(file))
    except (OSError, SafetensorError) as exc:
        raise RequestError(f"cannot read {file}: {_first_line(exc)}", param="path") from None


def _refuse_non_finite(file: Path, key: str, tensor: torch.Tensor, served_dtype: torch.dtype | None = None) -> None:
    """Refuse NaN and inf: served, they make every later answer fail (sampling from NaN probabilities).

    Checked as served: a float32 value past float16's range would become inf in a float16 model.
    """
    served = tensor if served_dtype is None else tensor.to(served_dtype)
    if served.is_floating_point() and not torch.isfinite(served).all():
        bad = int((~torch.isfinite(served)).sum())
        cast = (
            f" once cast to the served {str(served_dtype).removeprefix('torch.')}"
            if served.dtype != tensor.dtype
            else ""
        )
        raise RequestError(
            f"{file}: {key!r} has {bad} non-finite values (NaN or inf) among {tensor.numel()}{cast}; "
            "the served weights are unchanged",
            param="path",
            code="weights_not_finite",
        )


def _first_line(exc: BaseException) -> str:
    """An exception's message on one line; a heading line ending in ':' keeps its first detail
    (torch's ``Error(s) in loading state_dict ...:`` says what failed only on the next line)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def create_app(
    engine: AgentInference,
    model_name: str,
    *,
    default_max_tokens: int = 512,
    allow_weight_updates: bool = False,
    limits: Limits | None = None,
    api_key: str | None = None,
) -> Starlette:
    """The ASGI app serving ``engine`` under ``model_name``.

    ``allow_weight_updates`` enables ``POST /v1/load_weights``, which loads any directory on this
    machine that a client names: only for a trusted client, such as the trainer of an online loop.
    ``limits`` caps requests and load (``Limits()`` by default); with ``api_key`` every route
    but ``/health`` needs ``Authorization: Bearer <api_key>``.
    """
    server = ChatServer(
        engine,
        model_name,
        default_max_tokens=default_max_tokens,
        allow_weight_updates=allow_weight_updates,
        limits=limits,
    )
    routes = [
        Route("/health", server.health),
        Route("/metrics", server.metrics),
        Route("/v1/models", server.list_models),
        Route("/v1/models/{model:path}", server.get_model),
        Route("/v1/chat/completions", server.chat_completions, methods=["POST"]),
        Route("/v1/completions", server.completions, methods=["POST"]),
        Route("/v1/load_weights", server.load_weights, methods=["POST"]),
    ]
    middleware = [Middleware(RequireAPIKey, api_key=api_key)] if api_key else []
    return Starlette(routes=routes, middleware=middleware)
