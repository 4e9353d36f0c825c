"""Inference bridge: a trained checkpoint becomes a knowlyr agent (the online loop's last edge).

``AgentInference`` wraps a causal LM and its chat template: ``generate`` answers a chat,
``stream`` yields the answer as it is produced, and ``create_agent`` returns a stateful callable
``agent(observation) -> {"tool", "params", "thought"}`` (knowlyr's action format) that keeps the
conversation across steps, so ``collect()`` can roll it out in any ``AgentEnv``.

A model's answer becomes an action by the rules every knowlyr policy shares
(``knowlyrcore.tool_parsing``, documented there and in docs/core.md):

1. a ``<tool_call>{"name", "arguments"}</tool_call>`` block (the chat template's native format;
   the next observation is then sent back as a ``tool`` message);
2. ``Thought: ... Action: ...`` text, the trainer's agent SFT format, where the action is a JSON
   call object, ``name {json}``, ``name(...)`` or ``name free text`` (the text fills the tool's
   only required parameter, else ``{"input": text}``); the next observation goes back as
   ``Observation: ...``;
3. a bare or fenced JSON call object anywhere in the answer;
4. otherwise the closing tool with the answer as its text: ``respond`` ``{"message": answer}``,
   or the first of ``finish``/``submit``/``respond`` among the agent's tools
   (``create_agent(fallback_tool=...)`` forces one); the next observation is a plain user turn.

Arguments that are not a JSON object give ``params == {}`` and a ``"format_error"`` on the
action; the answer is then kept verbatim in the conversation and the observation (the
environment's verdict) follows as ``Observation: ...``.

Example:
    >>> inference = AgentInference.from_pretrained("smollm2-135m", max_new_tokens=64)  # doctest: +SKIP
    >>> agent = inference.create_agent(system_prompt="You are a coding assistant.")  # doctest: +SKIP
    >>> agent("Fix the failing test in tests/test_sort.py")  # doctest: +SKIP
    {'tool': 'respond', 'params': {'message': '...'}, 'thought': '...'}
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from agenttrainer.generation import end_token_ids
from agenttrainer.models import load_model_and_tokenizer
from knowlyrcore.deprecation import moved_names
from knowlyrcore.recording import observation_text
from knowlyrcore.tool_parsing import parse_reply

Message = dict[str, Any]


@dataclass
class Completion:
    """One generated answer with OpenAI-style accounting."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (end of turn or a stop string) or "length" (max_new_tokens reached)
    # with ``complete(top_logprobs=k)``: per generated token, (its id, its log-prob, the k likeliest
    # (id, log-prob) pairs), from the model's raw distribution (before temperature and top-p)
    logprobs: list[tuple[int, float, list[tuple[int, float]]]] | None = None


# parse_action and tool_schemas named other functions of knowlyr-core too (knowlyrcore.parse_action,
# knowlyrcore.tool_schemas); the old names still work here, warning once.
__getattr__ = moved_names(
    __name__,
    {},
    {
        "parse_action": ("agenttrainer.inference.action_from_answer", lambda: action_from_answer),
        "tool_schemas": ("agenttrainer.inference.chat_template_tools", lambda: chat_template_tools),
    },
)


def chat_template_tools(tools: list[Any] | None) -> list[dict[str, Any]] | None:
    """The ``tools`` argument of a chat template: tools as OpenAI function schemas
    ``{"type": "function", "function": {...}}``, or None when there are none.

    Accepts OpenAI schemas, ``{"name", "description", "parameters"}`` dicts, and objects with
    those attributes (e.g. knowlyr-core ``ToolSpec``). Tool *names* of an environment's domain are
    ``knowlyrcore.tool_schemas(names, domain)``'s job.
    """
    if not tools:
        return None
    schemas = []
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("function"), dict):
            schemas.append(tool)
            continue
        get = tool.get if isinstance(tool, dict) else lambda key, default=None, t=tool: getattr(t, key, default)
        name = get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"a tool needs a name, got {tool!r}")
        function = {
            "name": name,
            "description": get("description", "") or "",
            "parameters": get("parameters") or {"type": "object", "properties": {}},
        }
        schemas.append({"type": "function", "function": function})
    return schemas


class AgentInference:
    """Generation with a local checkpoint; thread-compatible, not thread-safe (callers serialise)."""

    def __init__(
        self, model: Any, tokenizer: Any, *, max_new_tokens: int = 512, temperature: float = 0.0, top_p: float = 1.0
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        # End generation at the end of the assistant turn as well as at the tokenizer's EOS.
        self.end_token_ids = end_token_ids(tokenizer)

    @classmethod
    def from_pretrained(
        cls,
        path_or_alias: str,
        *,
        torch_dtype: Any = None,
        device: str | torch.device | None = None,
        **gen_kwargs: Any,
    ) -> AgentInference:
        """Load a checkpoint directory, alias (``smollm2-135m``) or Hub id onto ``device`` (default
        CUDA when available, else the CPU); ``gen_kwargs`` are the defaults ``max_new_tokens``,
        ``temperature`` (0 = greedy) and ``top_p``. Prompts are encoded onto the model's device."""
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        model, tokenizer = load_model_and_tokenizer(path_or_alias, torch_dtype=torch_dtype)
        return cls(model.to(device), tokenizer, **gen_kwargs)

    # -- generation -----------------------------------------------------------------------

    def encode(self, messages: list[Message], tools: list[Any] | None = None) -> torch.Tensor:
        """Prompt token ids ``(1, T)`` for ``messages`` with the assistant turn opened."""
        batch = self.tokenizer.apply_chat_template(
            messages,
            tools=chat_template_tools(tools),
            add_generation_prompt=True,
            return_dict=True,
            return_tensors="pt",
        )
        return batch["input_ids"].to(self.model.device)

    def _generate_kwargs(
        self,
        input_ids: torch.Tensor,
        max_new_tokens: int | None,
        temperature: float | None,
        top_p: float | None,
        stop: list[str] | None,
    ) -> dict[str, Any]:
        temperature = self.temperature if temperature is None else temperature
        kwargs: dict[str, Any] = {
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids),
            "max_new_tokens": self.max_new_tokens if max_new_tokens is None else max_new_tokens,
            "eos_token_id": self.end_token_ids,
            "pad_token_id": self.tokenizer.pad_token_id,
            "do_sample": temperature > 0,
        }
        if temperature > 0:  # sampling knobs only exist when sampling (transformers warns otherwise)
            kwargs.update(temperature=temperature, top_p=self.top_p if top_p is None else top_p)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if stop:
            kwargs.update(stop_strings=list(stop), tokenizer=self.tokenizer)
        return kwargs

    def complete(
        self,
        messages: list[Message],
        tools: list[Any] | None = None,
        *,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        stop: list[str] | None = None,
        seed: int | None = None,
        top_logprobs: int | None = None,
    ) -> Completion:
        """Generate one assistant answer for ``messages``; with ``top_logprobs=k`` (k >= 0) the
        answer also carries each token's log-prob and the k likeliest alternatives."""
        input_ids = self.encode(messages, tools)  # (1, T)
        kwargs = self._generate_kwargs(input_ids, max_new_tokens, temperature, top_p, stop)
        if top_logprobs is not None:
            kwargs.update(return_dict_in_generate=True, output_logits=True)
        with torch.no_grad(), seeded(seed):
            output = self.model.generate(**kwargs)
        sequences = output.sequences if top_logprobs is not None else output  # (1, T + new)
        new_ids = sequences[0, input_ids.shape[1] :].tolist()
        text = self.tokenizer.decode(new_ids, skip_special_tokens=True)
        text, stopped = _cut_at_stop(text, stop)
        ended = bool(new_ids) and new_ids[-1] in self.end_token_ids
        finish = "stop" if ended or stopped or len(new_ids) < kwargs["max_new_tokens"] else "length"
        logprobs = None if top_logprobs is None else _token_logprobs(new_ids, output.logits, top_logprobs)
        return Completion(text, input_ids.shape[1], len(new_ids), finish, logprobs)

    def stream(self, messages: list[Message], tools: list[Any] | None = None, **options: Any) -> TextStream:
        """Like ``complete`` but an iterator of text pieces; ``.completion`` is set once it is exhausted."""
        return TextStream(self, messages, tools, **options)

    def generate(self, messages: list[Message], tools: list[Any] | None = None, **options: Any) -> str:
        """The assistant's answer text for ``messages`` (options as in ``complete``)."""
        return self.complete(messages, tools, **options).text

    def create_agent(
        self, system_prompt: str | None = None, tools: list[Any] | None = None, *, fallback_tool: str | None = None
    ) -> Agent:
        """A fresh stateful agent; create one per episode (or call ``agent.reset()``)."""
        return Agent(self, system_prompt=system_prompt, tools=tools, fallback_tool=fallback_tool)


@contextlib.contextmanager
def seeded(seed: int | None) -> Iterator[None]:
    """Sample from ``seed`` without disturbing the global RNG; without a seed, use the global RNG
    (so repeated unseeded calls draw different samples)."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _token_logprobs(
    new_ids: list[int], logits: tuple[torch.Tensor, ...], k: int
) -> list[tuple[int, float, list[tuple[int, float]]]]:
    """Each generated token's log-prob and the ``k`` likeliest tokens at its position."""
    result = []
    for token, step_logits in zip(new_ids, logits):  # each (1, V), the raw logits of one position
        dist = step_logits[0].float().log_softmax(-1)  # (V,)
        values, ids = dist.topk(min(k, dist.shape[0])) if k else (dist[:0], dist[:0].long())
        result.append((token, float(dist[token]), list(zip(ids.tolist(), values.tolist()))))
    return result


def _cut_at_stop(text: str, stop: list[str] | None) -> tuple[str, bool]:
    """OpenAI semantics: the answer ends before the first stop string, which is not included."""
    cuts = [i for i in (text.find(s) for s in stop or []) if i != -1]
    return (text[: min(cuts)], True) if cuts else (text, False)


def _stop_when(event: threading.Event) -> Any:
    from transformers import StoppingCriteria, StoppingCriteriaList

    class _Cancelled(StoppingCriteria):
        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
            return torch.full((input_ids.shape[0],), event.is_set(), dtype=torch.bool)  # (B,)

    return StoppingCriteriaList([_Cancelled()])


class TextStream:
    """Iterator over generated text pieces; generation runs in a worker thread."""

    def __init__(
        self,
        engine: AgentInference,
        messages: list[Message],
        tools: list[Any] | None,
        *,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        stop: list[str] | None = None,
        seed: int | None = None,
    ) -> None:
        from transformers import TextIteratorStreamer

        self.completion: Completion | None = None
        self._engine, self._stop = engine, list(stop or [])
        self._input_ids = engine.encode(messages, tools)  # (1, T)
        self._streamer = TextIteratorStreamer(engine.tokenizer, skip_prompt=True, skip_special_tokens=True)
        self._kwargs = engine._generate_kwargs(self._input_ids, max_new_tokens, temperature, top_p, stop)
        self._kwargs["streamer"] = self._streamer
        self._cancelled = threading.Event()
        self._kwargs["stopping_criteria"] = _stop_when(self._cancelled)
        self._seed = seed
        self._output: torch.Tensor | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with torch.no_grad(), seeded(self._seed):
                self._output = self._engine.model.generate(**self._kwargs)  # (1, T + new)
        except BaseException as exc:  # surfaced to the consumer in __iter__
            self._error = exc
            self._streamer.end()

    def close(self) -> None:
        """Stop generating after the current token (e.g. the client went away)."""
        self._cancelled.set()

    def __iter__(self) -> Iterator[str]:
        text, emitted = "", 0
        # Hold back a tail that could be the start of a stop string, so it is never sent.
        hold = max((len(s) - 1 for s in self._stop), default=0)
        for piece in self._streamer:
            text += piece
            cut, stopped = _cut_at_stop(text, self._stop)
            safe = len(cut) if stopped else max(emitted, len(text) - hold)
            if safe > emitted:
                yield text[emitted:safe]
                emitted = safe
            if stopped:
                break
        self._thread.join()
        if self._error is not None:
            raise self._error
        cut, stopped = _cut_at_stop(text, self._stop)
        if len(cut) > emitted:
            yield cut[emitted:]
        new_ids = self._output[0, self._input_ids.shape[1] :].tolist() if self._output is not None else []
        ended = bool(new_ids) and new_ids[-1] in self._engine.end_token_ids
        finish = "stop" if ended or stopped or len(new_ids) < self._kwargs["max_new_tokens"] else "length"
        self.completion = Completion(cut, self._input_ids.shape[1], len(new_ids), finish)


# -- agent --------------------------------------------------------------------------------


def observation_message(observation: Any, last_style: str | None) -> Message:
    """The chat message that carries ``observation`` after an answer of style ``last_style``.

    After a native tool call it is a ``tool`` message; after an ``Action:`` text answer (or a
    malformed call, kept verbatim) a user ``Observation: ...`` turn; after a plain reply, or
    for the task itself (``last_style=None``), a plain user turn.
    """
    content = observation_text(observation)
    if last_style == "tool_call":
        return {"role": "tool", "content": content}
    if last_style == "text":
        return {"role": "user", "content": f"Observation: {content}"}
    return {"role": "user", "content": content}


def answer_style(reply: Any) -> str:
    """How an answer is kept in the chat: a call whose arguments were unusable stays verbatim
    (``"text"``), so the model sees what it wrote."""
    return "text" if reply.style == "tool_call" and "format_error" in reply.action else reply.style


def action_from_answer(text: str, tools: list[Any] | None = None) -> tuple[dict[str, Any], str] | None:
    """The knowlyr action in a model answer and its style (``"tool_call"`` or ``"text"``), or None
    when the answer calls no tool (``knowlyrcore.parse_reply`` gives the closing action then).

    Example:
        >>> action_from_answer('Thought: look around\\nAction: {"name": "bash", "parameters": {"command": "ls"}}')
        ({'tool': 'bash', 'params': {'command': 'ls'}, 'thought': 'look around'}, 'text')
    """
    reply = parse_reply(text, tools)
    return None if reply.style == "reply" else (reply.action, reply.style)


class Agent:
    """``agent(observation) -> action``, a knowlyr ``Policy``; keeps the conversation so every step
    sees the history (``reset(task)`` starts a new episode; the task itself arrives as the first
    observation)."""

    def __init__(
        self,
        engine: AgentInference,
        *,
        system_prompt: str | None = None,
        tools: list[Any] | None = None,
        fallback_tool: str | None = None,
    ) -> None:
        self.engine = engine
        self.system_prompt = system_prompt
        self.tools = chat_template_tools(tools)
        self.fallback_tool = fallback_tool
        self.messages: list[Message] = []
        self._last_style: str | None = None
        self.reset()

    def reset(self, task: Any = None) -> None:
        """Forget the conversation (start a new episode)."""
        self.messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        self._last_style = None

    def __call__(self, observation: Any) -> dict[str, Any]:
        self.messages.append(observation_message(observation, self._last_style))
        answer = self.engine.generate(self.messages, self.tools)
        reply = parse_reply(answer, self.tools, closing_tool=self.fallback_tool)
        style = answer_style(reply)
        self.messages.append(self._assistant_message(answer, reply.action, style))
        self._last_style = style
        return reply.action

    @staticmethod
    def _assistant_message(answer: str, action: dict[str, Any], style: str) -> Message:
        if style != "tool_call":
            return {"role": "assistant", "content": answer}
        # Re-render native calls canonically so the next prompt matches the template's format.
        call = {"type": "function", "function": {"name": action["tool"], "arguments": action["params"]}}
        return {"role": "assistant", "content": action["thought"], "tool_calls": [call]}
