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
with the chat template and ``agenttrainer.generation.LocalGenerator`` answers them all at once:
the prompts are LEFT-padded into one batch with an attention mask and ``model.generate`` runs
once for the batch (in chunks of ``batch_size`` when set).

Generation goes through ``LocalGenerator``'s acting engine (``agenttrainer.engine``): each
episode's keys and values stay cached between turns, so a turn prefills only what its prompt adds
to the last one (the answer and the new observation), and the prompts' shared system turn with
the tool schemas is prefilled once. The chat is rendered as text and re-tokenised every turn, so
where re-tokenising the last answer differs from the ids sampled the engine recomputes from there
(``generator.stats["mismatched_rows"]``). ``reuse_cache=False`` is the older path: every turn
prefills each episode's whole history again past the prompts' common prefix. Greedy answers equal
one-at-a-time answers up to float rounding in the batched matmuls (tested equal on tiny fp32
models and on SmolLM2-135M, and turn by turn against the re-prefill path).

An environment whose tools differ per task (BFCL: the task's functions) or change during an
episode hands them over by ``set_tools_batch``: each episode is then prompted (unless
``include_tools`` is false) and parsed with its own tools, and the shared prefix shrinks to what
the prompts still share.

Simplification: the chat is text, not token ids (``TokenPolicy`` keeps the sampled ids).

Example:
    >>> policy = LocalBatchPolicy.from_pretrained("smollm2-135m", batch_size=32)  # doctest: +SKIP
    >>> policy.reset_batch([None, None])  # doctest: +SKIP
    >>> policy.act_batch(["Say hello.", None])  # doctest: +SKIP
    [{'tool': 'respond', 'params': {'message': 'Hello! ...'}, 'thought': '', 'usage': {...}}, None]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agenttrainer.generation import LocalGenerator
from agenttrainer.inference import (
    Agent,
    AgentInference,
    Completion,
    answer_style,
    chat_template_tools,
    observation_message,
)
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
        include_tools: bool = True,
        reuse_cache: bool = True,
    ) -> None:
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 or None (one batch), got {batch_size}")
        self.engine = engine
        self.system_prompt = system_prompt
        self.tools = chat_template_tools(tools)
        self.include_tools = include_tools
        self.batch_size = batch_size
        self.fallback_tool = fallback_tool
        self.reuse_cache = reuse_cache
        self.messages: list[list[Message]] = []
        self.episode_tools: list[list[dict[str, Any]] | None] = []  # per episode: its tools (``tools`` until set)
        self._last_styles: list[str | None] = []  # per episode: style of the last answer, None before any
        self._generator: LocalGenerator | None = None

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
        torch_dtype: Any = None,
        include_tools: bool = True,
        reuse_cache: bool = True,
    ) -> LocalBatchPolicy:
        """Load a checkpoint directory, alias (``smollm2-135m``) or Hub id; temperature 0 = greedy;
        ``torch_dtype`` (e.g. ``torch.bfloat16``: about 2x faster generation on a CPU with AMX)."""
        engine = AgentInference.from_pretrained(
            path_or_alias, torch_dtype=torch_dtype, max_new_tokens=max_new_tokens, temperature=temperature
        )
        return cls(
            engine,
            system_prompt=system_prompt,
            tools=tools,
            batch_size=batch_size,
            fallback_tool=fallback_tool,
            include_tools=include_tools,
            reuse_cache=reuse_cache,
        )

    # -- the BatchPolicy protocol ----------------------------------------------------------

    def reset_batch(self, tasks: Sequence[Any]) -> None:
        """Start ``len(tasks)`` fresh conversations (the task text arrives as the first observation)."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        self.messages = [list(system) for _ in tasks]
        self._last_styles = [None] * len(tasks)
        self.episode_tools = [self.tools] * len(tasks)
        if self._generator is not None:
            self._generator.weights_updated()  # cached prefix keys/values: the weights may have been trained since

    def act_batch(self, observations: Sequence[Any | None]) -> list[dict[str, Any] | None]:
        """One action per episode (``None`` where the observation is ``None``: that episode ended)."""
        if len(observations) != len(self.messages):
            raise ValueError(f"act_batch got {len(observations)} observations for {len(self.messages)} episodes")
        live = [i for i, observation in enumerate(observations) if observation is not None]
        for i in live:
            self._add_observation(i, observations[i])
        chats, tools = [self.messages[i] for i in live], [self.episode_tools[i] for i in live]
        # the tools passed only when some episode has its own: generate_batch(chats) stays the call otherwise
        own = any(t is not self.tools for t in tools)
        completions = self.generate_batch(chats, tools) if own else self.generate_batch(chats)
        actions: list[dict[str, Any] | None] = [None] * len(observations)
        for i, completion in zip(live, completions):
            actions[i] = self._answer(i, completion)
        return actions

    def set_tools_batch(self, tools_batch: Sequence[list[Any] | None]) -> None:
        """Episode ``i``'s environment offers ``tools_batch[i]`` from now on (None: its tools are unchanged)."""
        if len(tools_batch) != len(self.messages):
            raise ValueError(f"set_tools_batch got {len(tools_batch)} tool lists for {len(self.messages)} episodes")
        for i, tools in enumerate(tools_batch):
            if tools is not None:
                self.episode_tools[i] = chat_template_tools(list(tools))

    # -- generation -------------------------------------------------------------------------

    @property
    def generator(self) -> LocalGenerator:
        """Batched generation with the engine's model (built on first use)."""
        if self._generator is None:
            self._generator = LocalGenerator(
                self.engine.model,
                self.engine.tokenizer,
                batch_size=self.batch_size,
                logprobs=False,
                reuse_cache=self.reuse_cache,
            )
        return self._generator

    def generate_batch(
        self, chats: Sequence[list[Message]], tools_batch: Sequence[list[Any] | None] | None = None
    ) -> list[Completion]:
        """One assistant answer per chat (as ``AgentInference.complete`` would give, batched), each
        prompted with its tools (``tools_batch``, default ``tools``) unless ``include_tools`` is false."""
        engine = self.engine
        tools_batch = [self.tools] * len(chats) if tools_batch is None else tools_batch
        if len(tools_batch) != len(chats):
            raise ValueError(f"generate_batch got {len(tools_batch)} tool lists for {len(chats)} chats")
        prompts = [
            engine.encode(chat, tools if self.include_tools else None)[0].tolist()
            for chat, tools in zip(chats, tools_batch)
        ]
        samples = self.generator.generate(
            prompts, max_new_tokens=engine.max_new_tokens, temperature=engine.temperature, top_p=engine.top_p
        )
        return [
            Completion(
                engine.tokenizer.decode(sample.token_ids, skip_special_tokens=True),
                len(prompt),
                len(sample.token_ids),
                "stop" if sample.finish_reason == "stop" or len(sample.token_ids) < engine.max_new_tokens else "length",
            )
            for prompt, sample in zip(prompts, samples)
        ]

    # -- conversation bookkeeping (as inference.Agent) -----------------------------------------

    def _add_observation(self, i: int, observation: Any) -> None:
        self.messages[i].append(observation_message(observation, self._last_styles[i]))

    def _answer(self, i: int, completion: Completion) -> dict[str, Any]:
        reply = parse_reply(completion.text, self.episode_tools[i], closing_tool=self.fallback_tool)
        style = answer_style(reply)
        self.messages[i].append(Agent._assistant_message(completion.text, reply.action, style))
        self._last_styles[i] = style
        usage = {"prompt_tokens": completion.prompt_tokens, "completion_tokens": completion.completion_tokens}
        return {**reply.action, "usage": usage}
