"""Batched acting: many episodes in lockstep, one ``generate`` call per turn for all of them.

``LocalBatchPolicy`` implements knowlyr-core's ``BatchPolicy`` (``reset_batch(tasks)``,
``act_batch(observations)``) over an ``AgentInference``. Each episode keeps its own chat exactly
as ``inference.Agent`` does: the first observation is the user turn; after a native tool call the
next observation is a ``tool`` message, after an ``Action:`` text answer a user
``Observation: ...`` turn, after a plain reply a plain user turn; tool calls are re-rendered
canonically. Answers become actions by the parser every knowlyr policy shares
(``knowlyrcore.tool_parsing.parse_reply``), a reply without a tool call becoming the closing
tool (``fallback_tool``, else ``respond`` or the first of ``finish``/``submit``/``respond``
among the tools). What changes is the generation: every live episode's prompt is rendered
with the chat template, the prompts are LEFT-padded into one batch with an attention mask, and
``model.generate`` runs once for the batch (in chunks of ``batch_size`` when set).

Every episode's prompt opens with the same tokens: the system turn with the tool schemas, ~1,000
tokens for a real tool set, often more than the task and history after it. Their keys and values
are computed once per ``reset_batch`` and copied into each batch's (static, preallocated) KV
cache, so only the rest of each prompt is prefilled. A batch row is thus ``[shared prefix | pads | rest]``.

Padding keeps batched decoding exact: the attention mask hides the pads as keys, and transformers
derives position ids from the mask (``cumsum(mask) - 1``), so every row sees the positions, keys
and values of its prompt alone and its new tokens at the right edge. Greedy batched answers
equal one-at-a-time answers up to float rounding in the batched matmuls (tested equal on tiny
fp32 models and on SmolLM2-135M).

Simplifications: beyond the shared prefix there is no caching across turns (each turn prefills
the episode's whole history, as ``Agent`` does), and a chunk keeps decoding until its longest
answer ends.

Example:
    >>> policy = LocalBatchPolicy.from_pretrained("smollm2-135m", batch_size=32)  # doctest: +SKIP
    >>> policy.reset_batch([None, None])  # doctest: +SKIP
    >>> policy.act_batch(["Say hello.", None])  # doctest: +SKIP
    [{'tool': 'respond', 'params': {'message': 'Hello! ...'}, 'thought': '', 'usage': {...}}, None]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agenttrainer.inference import Agent, AgentInference, Completion, answer_style, observation_message, tool_schemas
from knowlyrcore.tool_parsing import parse_reply

Message = dict[str, Any]


class LocalBatchPolicy:
    """A ``BatchPolicy`` acting with a local model: one chat per episode, one batch per turn.

    Actions are ``Agent``'s (``{"tool", "params", "thought"}``, plus ``format_error`` when the
    model's call was malformed) with ``"usage": {"prompt_tokens", "completion_tokens"}`` added;
    ``messages[i]`` is episode ``i``'s conversation so far.
    """

    def __init__(
        self,
        engine: AgentInference,
        *,
        system_prompt: str | None = None,
        tools: list[Any] | None = None,
        batch_size: int | None = None,
        fallback_tool: str | None = None,
    ) -> None:
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 or None (one batch), got {batch_size}")
        self.engine = engine
        self.system_prompt = system_prompt
        self.tools = tool_schemas(tools)
        self.batch_size = batch_size
        self.fallback_tool = fallback_tool
        self.messages: list[list[Message]] = []
        self._last_styles: list[str | None] = []  # per episode: style of the last answer, None before any
        self._prefix: tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]] | None = None

    @classmethod
    def from_pretrained(
        cls,
        path_or_alias: str,
        *,
        system_prompt: str | None = None,
        tools: list[Any] | None = None,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        batch_size: int | None = None,
        fallback_tool: str | None = None,
    ) -> LocalBatchPolicy:
        """Load a checkpoint directory, alias (``smollm2-135m``) or Hub id; temperature 0 = greedy."""
        engine = AgentInference.from_pretrained(path_or_alias, max_new_tokens=max_new_tokens, temperature=temperature)
        return cls(engine, system_prompt=system_prompt, tools=tools, batch_size=batch_size, fallback_tool=fallback_tool)

    # -- the BatchPolicy protocol ----------------------------------------------------------

    def reset_batch(self, tasks: Sequence[Any]) -> None:
        """Start ``len(tasks)`` fresh conversations (the task text arrives as the first observation)."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        self.messages = [list(system) for _ in tasks]
        self._last_styles = [None] * len(tasks)
        self._prefix = None  # recomputed on first use: the weights may have been trained since

    def act_batch(self, observations: Sequence[Any | None]) -> list[dict[str, Any] | None]:
        """One action per episode (``None`` where the observation is ``None``: that episode ended)."""
        if len(observations) != len(self.messages):
            raise ValueError(f"act_batch got {len(observations)} observations for {len(self.messages)} episodes")
        live = [i for i, observation in enumerate(observations) if observation is not None]
        for i in live:
            self._add_observation(i, observations[i])
        completions = self.generate_batch([self.messages[i] for i in live])
        actions: list[dict[str, Any] | None] = [None] * len(observations)
        for i, completion in zip(live, completions):
            actions[i] = self._answer(i, completion)
        return actions

    # -- generation -------------------------------------------------------------------------

    def generate_batch(self, chats: Sequence[list[Message]]) -> list[Completion]:
        """One assistant answer per chat (as ``AgentInference.complete`` would give, batched)."""
        prompts = [self.engine.encode(chat, self.tools)[0] for chat in chats]  # each (T_i,)
        # Longest first: chunks then hold prompts of similar length, so little of them is padding.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]), reverse=True)
        size = self.batch_size or max(len(order), 1)
        completions: list[Completion | None] = [None] * len(prompts)
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            for i, completion in zip(chunk, self._generate([prompts[i] for i in chunk])):
                completions[i] = completion
        return completions  # type: ignore[return-value]  # every slot was filled above

    def _generate(self, prompts: list[torch.Tensor]) -> list[Completion]:
        """One ``generate`` call for ``prompts``; each row is ``[shared prefix | left pads | rest]``."""
        engine, tokenizer = self.engine, self.engine.tokenizer
        prefix_ids, prefix_kv = self._shared_prefix()
        shared = len(prefix_ids)
        if not all(len(p) > shared and torch.equal(p[:shared], prefix_ids) for p in prompts):
            shared = 0  # a chat that does not open with this policy's system turn (direct generate_batch use)
        rests = [p[shared:] for p in prompts]
        width = shared + max(len(r) for r in rests)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else engine.end_token_ids[0]
        input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=prompts[0].device)  # (B, T)
        attention_mask = torch.zeros_like(input_ids)  # (B, T)
        input_ids[:, :shared] = prefix_ids[:shared]
        attention_mask[:, :shared] = 1
        for row, rest in enumerate(rests):
            input_ids[row, width - len(rest) :] = rest
            attention_mask[row, width - len(rest) :] = 1
        kwargs = engine._generate_kwargs(input_ids, None, None, None, None)
        kwargs["attention_mask"] = attention_mask
        if shared:
            kwargs["past_key_values"] = _prefilled_cache(
                engine.model, prefix_kv, batch=len(prompts), max_len=width + kwargs["max_new_tokens"]
            )
        with torch.no_grad():
            output = engine.model.generate(**kwargs)  # (B, T + new)
        completions = []
        for prompt, row in zip(prompts, output[:, width:].tolist()):
            new_ids = _through_first_end(row, engine.end_token_ids)  # rows that ended early are padded after
            text = tokenizer.decode(new_ids, skip_special_tokens=True)
            ended = bool(new_ids) and new_ids[-1] in engine.end_token_ids
            finish = "stop" if ended or len(new_ids) < kwargs["max_new_tokens"] else "length"
            completions.append(Completion(text, len(prompt), len(new_ids), finish))
        return completions

    def _shared_prefix(self) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """The prompt tokens every episode starts with (system turn and tool schemas, up to the first
        user message) and their per-layer keys/values ``(1, H_kv, P, D)``; computed once per
        ``reset_batch`` (weights are assumed fixed while episodes run).

        Found by rendering two chats that differ only in the user's text and keeping their common
        token prefix, so it holds for any chat template.
        """
        if self._prefix is None:
            system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
            a, b = (self.engine.encode([*system, {"role": "user", "content": probe}], self.tools)[0] for probe in "AB")
            shared = next((i for i, (x, y) in enumerate(zip(a.tolist(), b.tolist())) if x != y), 0)
            prefix_ids, prefix_kv = a[:shared], []
            if shared:
                from transformers import DynamicCache

                cache = DynamicCache(config=self.engine.model.config)
                with torch.no_grad():
                    self.engine.model(prefix_ids[None], past_key_values=cache, use_cache=True)
                prefix_kv = [(layer.keys, layer.values) for layer in cache.layers]
            self._prefix = (prefix_ids, prefix_kv)
        return self._prefix

    # -- conversation bookkeeping (as inference.Agent) -----------------------------------------

    def _add_observation(self, i: int, observation: Any) -> None:
        self.messages[i].append(observation_message(observation, self._last_styles[i]))

    def _answer(self, i: int, completion: Completion) -> dict[str, Any]:
        reply = parse_reply(completion.text, self.tools, closing_tool=self.fallback_tool)
        style = answer_style(reply)
        self.messages[i].append(Agent._assistant_message(completion.text, reply.action, style))
        self._last_styles[i] = style
        usage = {"prompt_tokens": completion.prompt_tokens, "completion_tokens": completion.completion_tokens}
        return {**reply.action, "usage": usage}


def _prefilled_cache(
    model: Any, prefix_kv: list[tuple[torch.Tensor, torch.Tensor]], *, batch: int, max_len: int
) -> Any:
    """A KV cache for ``batch`` rows of ``max_len`` tokens that already holds the shared prefix.

    Static (preallocated, written in place): a dynamic cache concatenates its whole content at every
    decoding step, which costs more than the step itself once every row carries a long prefix.
    """
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=max_len)
    for layer, (keys, values) in enumerate(prefix_kv):
        cache.update(keys.expand(batch, -1, -1, -1), values.expand(batch, -1, -1, -1), layer)
    return cache


def _through_first_end(ids: list[int], end_ids: list[int]) -> list[int]:
    """``ids`` up to and including the first end-of-turn token (what one-at-a-time decoding returns)."""
    for position, token in enumerate(ids):
        if token in end_ids:
            return ids[: position + 1]
    return ids
