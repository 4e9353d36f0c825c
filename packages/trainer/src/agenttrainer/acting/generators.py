"""Token-in / token-out generation: prompts are token ids, answers are token ids with log-probs.

The local policy (``agenttrainer.acting.TokenPolicy``) acts through a ``Generator``, and online RL
trains on exactly the tokens it sampled. Text is never the interface: a
chat re-rendered from text can tokenize differently from what was sampled (merged tokens,
canonicalised JSON, stripped whitespace), and the log-probs of the update would then belong to
a sequence the policy never produced. So a ``Generator`` takes prompt token ids and returns, per
prompt, the sampled ids, the policy's log-probability of each at sampling time and why it
stopped.

Two implementations share the interface (and ``SamplingGenerator``'s ``generate``, which answers
no prompts without a model call or a request):

- ``LocalGenerator``: an in-process transformers model, through the acting engine
  (``agenttrainer.acting.engine.ActingEngine``): each prompt reuses the keys and values of the last
  call's row it extends, so a turn prefills only its new tokens, the prompts' shared prefix is
  prefilled once, and a row leaves the decode batch when its answer ends. ``reuse_cache=False``
  is the re-prefill path: the prompts of one call are LEFT-padded into one batch and
  ``model.generate`` runs once per chunk of ``batch_size`` rows, their longest common prefix
  prefilled once into a static KV cache that every row starts from. Log-probs are the model's
  own (``log_softmax`` of the raw logits, i.e. temperature 1): what the trainer's update computes again, so their difference measures
  numerical drift between sampling and training, not a different distribution.
- ``ServerGenerator``: any OpenAI-compatible server with the completions endpoint taking token
  ids as the prompt and returning them (vLLM's ``return_token_ids``; ``knowlyr-trainer serve``
  speaks the same fields). One request per call carries every prompt (``prompt`` as a list of
  id lists). ``push_weights`` sends updated weights between iterations.

An endpoint that is down or times out raises ``GenerationError``, an ``InfrastructureError``:
the episodes waiting on it did not fail on their merits and are masked out of the update. A
server's answers are not trusted either: ``check_sample`` (which ``TokenPolicy`` applies to
every answer of every generator) refuses token ids outside ``[0, vocab_size)`` or not integers
and log-probs that are not finite numbers, as a ``GenerationError`` for that episode.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import threading
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from agenttrainer.acting.engine import MIN_SHARED_PREFIX_TOKENS, ActingEngine, cache_keyword
from agenttrainer.models import load_model_and_tokenizer
from agenttrainer.models.attention import base_model
from knowlyrcore.errors import InfrastructureError


class GenerationError(InfrastructureError):
    """The generation backend failed (endpoint down, timeout, malformed response)."""


@dataclass
class TokenSample:
    """One sampled answer: its token ids, their log-probs at sampling time, and why it stopped.

    ``finish_reason`` is ``"stop"`` (an end-of-turn token, included in ``token_ids``) or
    ``"length"`` (``max_new_tokens`` reached).
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    entropy: float | None = None  # mean entropy (nats) of the policy over the answer's tokens, when known


class Generator(Protocol):
    """Samples one answer per prompt (token ids in, token ids and log-probs out)."""

    def generate(
        self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0
    ) -> list[TokenSample]: ...

    def weights_updated(self, model: Any = None, path: str | None = None) -> None:
        """The policy's weights changed: drop caches (local) or load the weights saved at ``path`` (server)."""


def check_sample(sample: TokenSample, vocab_size: int) -> None:
    """Raise ``GenerationError`` unless ``sample`` holds token ids in ``[0, vocab_size)`` (ints,
    not bools) and one finite log-prob per id. Ids from a server are data from elsewhere: one out
    of range would crash decoding (``OverflowError``) or the embedding lookup (``IndexError``)."""
    ids, logprobs = sample.token_ids, sample.logprobs
    if not isinstance(ids, list) or not isinstance(logprobs, list) or len(ids) != len(logprobs):
        raise GenerationError("the answer needs a list of token ids and one log-prob per id")
    for position, token in enumerate(ids):
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < vocab_size:
            raise GenerationError(f"answer token {position} is {_show(token)}, not a token id in [0, {vocab_size})")
    for position, value in enumerate(logprobs):
        finite = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
        if isinstance(value, bool) or not finite:
            raise GenerationError(f"answer log-prob {position} is {_show(value)}, not a finite number")


def _show(value: Any) -> str:
    """A short description of an untrusted JSON value (a 10,000-digit integer has no ``repr``)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return repr(value)[:40]


def load_acting_model(
    path_or_alias: str, *, torch_dtype: Any = None, device: str | torch.device | None = None
) -> tuple[Any, Any]:
    """A checkpoint directory, alias (``smollm2-135m``) or Hub id loaded to act: the model on
    ``device`` (default CUDA when available, else the CPU) and its tokenizer."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer = load_model_and_tokenizer(path_or_alias, torch_dtype=torch_dtype)
    return model.to(device), tokenizer


def end_token_ids(tokenizer: Any) -> list[int]:
    """Tokens that end an assistant turn: the tokenizer's EOS and ChatML's ``<|im_end|>``."""
    ids = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")}
    return sorted(i for i in ids if isinstance(i, int) and i != tokenizer.unk_token_id)


def through_first_end(ids: list[int], end_ids: Sequence[int]) -> list[int]:
    """``ids`` up to and including the first end-of-turn token (later ones are a batch's padding)."""
    for position, token in enumerate(ids):
        if token in end_ids:
            return ids[: position + 1]
    return ids


class SamplingGenerator(ABC):
    """What both generators share: ``generate`` answers no prompts with no samples, without a
    model call or a request; ``_sample`` gets at least one prompt."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
    ) -> list[TokenSample]:
        """One sample per prompt, in the prompts' order."""
        if not prompts:
            return []
        return self._sample(prompts, max_new_tokens, temperature, top_p)

    @abstractmethod
    def _sample(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float, top_p: float
    ) -> list[TokenSample]:
        """One sample per prompt of a non-empty ``prompts``."""


class LocalGenerator(SamplingGenerator):
    """Batched sampling with an in-process causal LM (a ``PreTrainedModel`` or a peft model)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        batch_size: int | None = None,
        logprobs: bool = True,
        reuse_cache: bool = True,
        cache_bytes: int | None = None,
        engine: ActingEngine | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        """``engine``: an acting engine of ``model`` to generate through instead of a new one, so
        that everything acting with one model shares one KV cache (``knowlyr-trainer serve``: the
        chat endpoint's engine, ``AgentInference.acting_engine``); it keeps its own settings.
        ``lock``: held through every call, when others act with the same model and engine from
        other threads (``AgentInference.acting_lock``: its agents and its chat answers)."""
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 or None (one batch), got {batch_size}")
        if engine is not None and not reuse_cache:
            raise ValueError("an engine to share needs reuse_cache=True (the re-prefill path has no engine)")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.logprobs = logprobs
        self.lock = lock
        self.end_token_ids = end_token_ids(tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else self.end_token_ids[0]
        self._prefix: tuple[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] | None = None
        self._reprefill_stats = {"calls": 0, "computed_tokens": 0, "logit_rows": 0}
        # reuse_cache: the acting engine (each row's KV cache kept across calls); False: the
        # re-prefill path (every call prefills its prompts again past their common prefix)
        self.engine = engine
        if engine is None and reuse_cache:
            self.engine = ActingEngine(
                model,
                self.end_token_ids,
                self.pad_token_id,
                logprobs=logprobs,
                cache_bytes=cache_bytes,
                max_rows=batch_size,
            )

    @property
    def stats(self) -> dict[str, int]:
        """Counters of the work done: the acting engine's (prompt, reused and prefilled tokens, decode
        steps, ...), or on the re-prefill path the tokens the model ran on (``computed_tokens``, pads
        included) and the rows the LM head ran on (``logit_rows``)."""
        return dict(self.engine.stats) if self.engine is not None else dict(self._reprefill_stats)

    def weights_updated(self, model: Any = None, path: str | None = None) -> None:
        self._prefix = None  # cached keys/values belong to the old weights
        if self.engine is not None:
            self.engine.weights_updated()

    def _sample(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float, top_p: float
    ) -> list[TokenSample]:
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        with self.lock if self.lock is not None else contextlib.nullcontext():
            if self.engine is None:
                return self._reprefill(prompts, max_new_tokens, temperature, top_p)
            answers = self.engine.generate(prompts, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p)
        return [TokenSample(a.token_ids, a.logprobs, a.finish_reason, a.entropy) for a in answers]

    def _reprefill(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float, top_p: float
    ) -> list[TokenSample]:
        """The re-prefill path (``reuse_cache=False``): chunks of ``batch_size`` prompts, one
        ``generate`` call each."""
        # Longest first: chunks then hold prompts of similar length, so little of them is padding.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]), reverse=True)
        size = self.batch_size or len(order)
        samples: list[TokenSample | None] = [None] * len(prompts)
        training = self.model.training
        self.model.eval()  # no dropout while acting
        try:
            for start in range(0, len(order), size):
                chunk = order[start : start + size]
                batch = [list(prompts[i]) for i in chunk]
                for i, sample in zip(chunk, self._generate(batch, max_new_tokens, temperature, top_p)):
                    samples[i] = sample
        finally:
            self.model.train(training)
        return samples  # type: ignore[return-value]  # every slot was filled above

    def _generate(
        self, prompts: list[list[int]], max_new_tokens: int, temperature: float, top_p: float
    ) -> list[TokenSample]:
        """One ``generate`` call; each row is ``[shared prefix | left pads | rest of its prompt]``."""
        device = next(self.model.parameters()).device
        shared = _common_prefix_length(prompts)
        shared = shared if shared >= MIN_SHARED_PREFIX_TOKENS else 0
        rests = [p[shared:] for p in prompts]
        width = shared + max(len(r) for r in rests)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long, device=device)  # (B, T)
        attention_mask = torch.zeros_like(input_ids)  # (B, T)
        input_ids[:, :shared] = torch.tensor(prompts[0][:shared], device=device)
        attention_mask[:, :shared] = 1
        for row, rest in enumerate(rests):
            input_ids[row, width - len(rest) :] = torch.tensor(rest, device=device)
            attention_mask[row, width - len(rest) :] = 1
        kwargs: dict[str, Any] = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "max_new_tokens": max_new_tokens,
            "eos_token_id": self.end_token_ids,
            "pad_token_id": self.pad_token_id,
            "do_sample": temperature > 0,
            "return_dict_in_generate": True,
            "output_logits": self.logprobs,
        }
        if temperature > 0:
            kwargs.update(temperature=temperature, top_p=top_p, top_k=None)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        counts = self._reprefill_stats
        counts["calls"] += 1
        if shared:
            if self._prefix is None or self._prefix[0] != tuple(prompts[0][:shared]):
                counts["computed_tokens"] += shared  # the prefix's own forward
            kwargs[cache_keyword(self.model)] = self._prefilled_cache(
                prompts[0][:shared], len(prompts), width + max_new_tokens
            )
        with torch.no_grad():
            out = self.model.generate(**kwargs)
            new = out.sequences[:, width:]  # (B, new)
            # every row runs the padded prompt rest, then one token per step until the longest ends
            counts["computed_tokens"] += len(prompts) * (width - shared + max(new.shape[1] - 1, 0))
            counts["logit_rows"] += len(prompts) * new.shape[1]
            logps = torch.zeros(new.shape, dtype=torch.float32)  # (B, new)
            entropy = torch.zeros(new.shape, dtype=torch.float32)  # (B, new)
            if self.logprobs:
                for t, logits in enumerate(out.logits):  # each (B, V), raw (before temperature / top-p)
                    dist = logits.float().log_softmax(-1)  # (B, V)
                    logps[:, t] = dist.gather(1, new[:, t : t + 1]).squeeze(1).cpu()
                    entropy[:, t] = -(dist.exp() * dist).sum(-1).cpu()
        samples = []
        for row_ids, row_logps, row_entropy in zip(new.tolist(), logps.tolist(), entropy.tolist()):
            ids = through_first_end(row_ids, self.end_token_ids)
            ended = bool(ids) and ids[-1] in self.end_token_ids
            mean_entropy = sum(row_entropy[: len(ids)]) / len(ids) if self.logprobs and ids else None
            samples.append(TokenSample(ids, row_logps[: len(ids)], "stop" if ended else "length", mean_entropy))
        return samples

    def _prefilled_cache(self, prefix: list[int], batch: int, max_len: int) -> Any:
        """A static KV cache for ``batch`` rows that already holds ``prefix`` (computed once per
        weights version and prefix).

        Static (preallocated, written in place): a dynamic cache concatenates its whole content at
        every decoding step, which costs more than the step itself once every row carries a long prefix.
        """
        from transformers import DynamicCache, StaticCache

        key = tuple(prefix)
        base = base_model(self.model)  # under a peft wrapper
        if self._prefix is None or self._prefix[0] != key:
            cache = DynamicCache(config=base.config)
            ids = torch.tensor([prefix], device=next(self.model.parameters()).device)
            with torch.no_grad():
                self.model(input_ids=ids, use_cache=True, **{cache_keyword(self.model): cache})
            self._prefix = (key, [(layer.keys, layer.values) for layer in cache.layers])
        static = StaticCache(config=base.config, max_cache_len=max_len)
        for layer, (keys, values) in enumerate(self._prefix[1]):
            static.update(keys.expand(batch, -1, -1, -1), values.expand(batch, -1, -1, -1), layer)
        return static


def _common_prefix_length(prompts: list[list[int]]) -> int:
    """Tokens every prompt starts with, leaving at least one token of each prompt to prefill."""
    shortest = min(len(p) for p in prompts) - 1
    first = prompts[0]
    for position in range(shortest):
        token = first[position]
        if any(p[position] != token for p in prompts):
            return position
    return max(shortest, 0)


class ServerGenerator(SamplingGenerator):
    """Sampling through an OpenAI-compatible server's ``/completions`` endpoint with token ids.

    Sends ``{"prompt": [[ids], ...], "logprobs": 0, "return_token_ids": true}`` and reads
    ``choices[i].token_ids`` and ``choices[i].logprobs.token_logprobs`` (vLLM >= 0.10.2,
    ``knowlyr-trainer serve``). ``push_weights`` selects how ``weights_updated`` reaches the
    server: ``"knowlyr"`` (``POST /load_weights {"path"}``, ``knowlyr-trainer serve
    --allow-weight-updates``), ``"vllm"`` (full weights reloaded in place through ``POST
    /collective_rpc``, then ``POST /reset_prefix_cache``: ``knowlyr-trainer serve --engine vllm
    --allow-weight-updates``, see ``agenttrainer.serving.vllm``), ``"vllm-lora"`` (``POST
    /load_lora_adapter``, then requests name the adapter) or ``"none"``.
    """

    #: the worker method ``push_weights="vllm"`` calls (serving/vllm_ext/knowlyr_vllm_worker.py)
    vllm_reload_method = "knowlyr_reload_weights"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 600.0,
        push_weights: str = "knowlyr",
    ) -> None:
        if push_weights not in ("knowlyr", "vllm", "vllm-lora", "none"):
            raise ValueError(f"push_weights must be 'knowlyr', 'vllm', 'vllm-lora' or 'none', got {push_weights!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.served_name = model
        self.api_key = api_key
        self.timeout = timeout
        self.push_weights = push_weights
        self._version = 0

    def _post(self, route: str, body: dict[str, Any], *, base_url: str | None = None, reply: str = "json") -> Any:
        """POST ``body``; the reply parsed as JSON, or (``reply="text"``: vLLM's adapter routes
        answer in plain text, its dev routes with an empty body) as text."""
        url = f"{base_url or self.base_url}{route}"
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                content = response.read()
                return content.decode(errors="replace") if reply == "text" else json.loads(content)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise GenerationError(f"{url}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, http.client.HTTPException, OSError, TimeoutError) as exc:
            raise GenerationError(f"{url}: endpoint unreachable ({exc!r})") from None
        except ValueError as exc:  # not JSON, not UTF-8, or an integer past Python's 4300 digits
            raise GenerationError(f"{url}: response is not JSON ({exc})") from None

    def _sample(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float, top_p: float
    ) -> list[TokenSample]:
        body = {
            "model": self.served_name,
            "prompt": [list(p) for p in prompts],
            "max_tokens": max_new_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "logprobs": 0,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        reply = self._post("/completions", body)
        where = f"{self.base_url}/completions"
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if not isinstance(choices, list) or len(choices) != len(prompts):
            raise GenerationError(f"{where}: expected {len(prompts)} choices, got {str(choices)[:200]}")
        samples: list[TokenSample | None] = [None] * len(prompts)
        for position, choice in enumerate(choices):
            if not isinstance(choice, dict):
                raise GenerationError(f"{where}: choice {position} is not an object")
            index = choice.get("index", position)
            if not isinstance(index, int) or not 0 <= index < len(prompts) or samples[index] is not None:
                raise GenerationError(f"{where}: choice {position} has a bad or repeated index {index!r}")
            ids = choice.get("token_ids")
            logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
            if not isinstance(ids, list) or not isinstance(logprobs, list) or len(ids) != len(logprobs):
                raise GenerationError(
                    f"{where}: choice {index} lacks token_ids/logprobs.token_logprobs "
                    "(vLLM needs return_token_ids support, >= 0.10.2)"
                )
            finish = "length" if choice.get("finish_reason") == "length" else "stop"
            # as sent: collect_rollouts' check_sample refuses what is not an id or a log-prob
            samples[index] = TokenSample(ids, logprobs, finish)
        return samples  # type: ignore[return-value]

    def weights_updated(self, model: Any = None, path: str | None = None) -> None:
        """Make the server sample from the new weights saved at ``path`` (a model or adapter dir)."""
        if self.push_weights == "none" or path is None:
            return
        if self.push_weights == "knowlyr":
            self._post("/load_weights", {"path": str(path)})
        elif self.push_weights == "vllm":  # vLLM's dev-mode routes live beside /v1, not under it
            root = self.base_url.removesuffix("/v1")
            rpc = {"method": self.vllm_reload_method, "kwargs": {"weights_path": str(path)}}
            self._post("/collective_rpc", rpc, base_url=root, reply="text")
            # cached prefixes hold keys/values computed by the old weights
            if not self._post("/reset_prefix_cache", {}, base_url=root).get("success"):
                raise GenerationError(f"{root}/reset_prefix_cache: not reset (requests still running?)")
        else:  # vLLM: a new adapter name per version, so no request is served by a stale one
            name = f"{self.model}-online-{self._version + 1}"
            self._post("/load_lora_adapter", {"lora_name": name, "lora_path": str(path)}, reply="text")
            if self.served_name != self.model:  # the previous version's adapter is served no more
                self._post("/unload_lora_adapter", {"lora_name": self.served_name}, reply="text")
            self.served_name = name
        self._version += 1
