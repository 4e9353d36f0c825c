"""``TokenPolicy``: the local policy. It samples token-in / token-out and keeps every token.

One class acts for every caller with a model of ours: ``knowlyr-hub evaluate`` (built by
``policy_from_spec``), ``collect`` and ``collect_batched``, the demo, online RL
(``collect_rollouts``), the seed wrappers' sampling and ``AgentInference.create_agent``. So the
number evaluation reports is measured on the path RL trains: greedy evaluation and greedy RL
rollouts of one checkpoint on the same tasks take the same actions. It is a ``BatchPolicy``
(``reset_batch`` / ``act_batch``, every live episode's ids to the generator in ONE call per
turn) and, as a batch of one, a per-episode ``Policy`` (``reset`` / ``policy(observation)``).
Any runner of knowlyr-core's acting loop (``knowlyrcore.rollout.play_episodes``) gets
trajectories whose steps carry ``token_ids`` and ``logprobs``, exactly what the policy sampled.

Each episode is one growing list of token ids (``ChatTokens``): the first prompt is the chat
template's rendering of the system turn (the policy's ``system_prompt``; None: the task's
``metadata['system_prompt']``; "": none), the episode's tool schemas (with ``include_tools``)
and the first observation (a list of chat messages is taken as the chat itself); each answer is
appended as the ids the ``Generator`` sampled, each later observation as the template's tokens
for it, in the message ``observation_message`` picks. An answer becomes an action by the parser
every knowlyr policy shares (``knowlyrcore.tool_parsing.parse_reply``; a reply without a tool
call becomes ``closing_tool``); a malformed call is passed on as the parser's action (with its
``format_error``) and counted in ``format_errors``.

The policy ends an episode itself (``STOP``) before a turn that would not fit in
``max_episode_tokens`` (``finish="token_budget"``), and when the generator failed it (the
backend raised, answered a wrong number of prompts, or with ids that are no tokens:
``check_sample``); such an episode's ``infra_error`` says why (``finish="infra_error"``).

``records[i]`` is episode ``i``'s ``TokenRecord``; ``finish_trajectory`` (called by the loop)
puts each step's sampled ids and log-probs on the recorded trajectory, with the observation
tokens that followed it and the first prompt's ids, so the token sequence is reproducible.

Example:
    >>> policy = TokenPolicy.from_pretrained("smollm2-135m", temperature=0.0)  # doctest: +SKIP
    >>> collect_batched("knowlyr/retail", policy, tasks)[0].steps[0].token_ids  # doctest: +SKIP
    [27, 14739, 46, ...]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agenttrainer.acting.chat import ChatTokens, answer_style, chat_template_tools, observation_message
from agenttrainer.acting.generators import (
    GenerationError,
    Generator,
    LocalGenerator,
    TokenSample,
    check_sample,
    load_acting_model,
)
from knowlyrcore import TaskInfo, Trajectory
from knowlyrcore.policy import STOP
from knowlyrcore.tool_parsing import parse_reply


@dataclass
class TokenRecord:
    """One episode at the token level: every id, which ones the model sampled and their log-probs."""

    token_ids: list[int] = field(default_factory=list)
    sampled: list[bool] = field(default_factory=list)  # True where the model produced the token
    logprobs: list[float] = field(default_factory=list)  # sampling-time log-prob (0.0 where not sampled)
    step_spans: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of each answer in token_ids
    format_errors: list[bool] = field(default_factory=list)  # per step
    entropies: list[float] = field(default_factory=list)  # per step: mean sampling entropy (local backend)
    finish: str = ""  # why the policy ended the episode: token_budget | infra_error ("" if it did not)
    infra_error: str | None = None  # the generation failure that ended it

    @property
    def sampled_tokens(self) -> int:
        return sum(self.sampled)

    def extend(self, ids: Sequence[int], *, sampled: bool, logprobs: Sequence[float] | None = None) -> None:
        self.token_ids.extend(ids)
        self.sampled.extend([sampled] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    def fail(self, exc: BaseException) -> None:
        """End the episode for a failure that is not the policy's (it is masked out of training)."""
        self.infra_error = f"{type(exc).__name__}: {exc}"[:500]
        self.finish = "infra_error"


class TokenPolicy:
    """The local policy over a ``Generator``: one token sequence per episode, one generate call per
    turn (a ``BatchPolicy``, and a per-episode ``Policy`` as a batch of one)."""

    def __init__(
        self,
        generator: Generator,
        tokenizer: Any,
        *,
        system_prompt: str | None = None,
        tools: list[Any] | None = None,
        include_tools: bool = True,
        closing_tool: str | None = None,
        max_new_tokens: int = 128,
        max_episode_tokens: int | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        vocab_size: int | None = None,
    ) -> None:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.generator = generator
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        self.tools = chat_template_tools(tools)  # the tools of an environment as built; set_tools_batch updates
        self.include_tools = include_tools
        self.closing_tool = closing_tool
        self.max_new_tokens = max_new_tokens
        self.max_episode_tokens = max_episode_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.vocab_size = vocab_size or len(tokenizer)  # ids a server sends are checked against it
        self.records: list[TokenRecord] = []
        self.tasks: list[TaskInfo | None] = []
        self.episode_tools: list[list[dict[str, Any]] | None] = []
        self._chats: list[ChatTokens | None] = []
        self._styles: list[str | None] = []  # per episode: style of the last answer, None before any

    @classmethod
    def from_pretrained(
        cls,
        path_or_alias: str,
        *,
        torch_dtype: Any = None,
        device: Any = None,
        batch_size: int | None = None,
        reuse_cache: bool = True,
        cache_bytes: int | None = None,
        **options: Any,
    ) -> TokenPolicy:
        """The policy of a checkpoint directory, alias (``smollm2-135m``) or Hub id, acting through
        a ``LocalGenerator`` (the acting engine; ``batch_size`` rows per forward at most,
        ``reuse_cache=False``: the re-prefill path). ``torch_dtype`` e.g. ``torch.bfloat16``:
        about 2x faster generation on a CPU with AMX. ``options`` are the policy's own
        (``system_prompt``, ``tools``, ``temperature``, ...)."""
        model, tokenizer = load_acting_model(path_or_alias, torch_dtype=torch_dtype, device=device)
        generator = LocalGenerator(
            model, tokenizer, batch_size=batch_size, reuse_cache=reuse_cache, cache_bytes=cache_bytes
        )
        return cls(generator, tokenizer, **options)

    # -- the Policy protocol: one episode ----------------------------------------------------

    def reset(self, task: TaskInfo | None = None) -> None:
        """Start one episode (the task arrives as the first observation)."""
        self.reset_batch([task])

    def __call__(self, observation: Any) -> Any:
        """The episode's next action (``STOP`` when the policy ends it: see the module docs)."""
        return self.act_batch([observation])[0]

    def set_tools(self, tools: list[Any]) -> None:
        """The episode's environment offers ``tools`` from now on."""
        self.set_tools_batch([tools])

    # -- the BatchPolicy protocol ----------------------------------------------------------

    def reset_batch(self, tasks: Sequence[TaskInfo | None]) -> None:
        self.generator.weights_updated()  # a cached prompt prefix: the weights may have been trained since
        self.tasks = list(tasks)
        self.records = [TokenRecord() for _ in tasks]
        self.episode_tools = [self.tools] * len(tasks)
        self._chats = [None] * len(tasks)
        self._styles = [None] * len(tasks)

    def set_tools_batch(self, tools_batch: Sequence[list[Any] | None]) -> None:
        """Episode ``i``'s environment offers ``tools_batch[i]`` from now on (None: unchanged). The
        first prompt shows the tools of the first turn; every answer is parsed with the current ones."""
        if len(tools_batch) != len(self.records):
            raise ValueError(f"set_tools_batch got {len(tools_batch)} tool lists for {len(self.records)} episodes")
        for i, tools in enumerate(tools_batch):
            if tools is not None:
                self.episode_tools[i] = chat_template_tools(list(tools))

    def act_batch(self, observations: Sequence[Any | None]) -> list[Any]:
        """One action per episode: ``None`` where the observation is ``None``, ``STOP`` where the
        policy ends the episode (token budget, generation failure)."""
        if len(observations) != len(self.records):
            raise ValueError(f"act_batch got {len(observations)} observations for {len(self.records)} episodes")
        actions: list[Any] = [None] * len(observations)
        asking = []
        for i, observation in enumerate(observations):
            if observation is None:
                continue
            if self._add_observation(i, observation):
                asking.append(i)
            else:
                actions[i] = STOP
        for i, sample in zip(asking, self._generate(asking)):
            actions[i] = STOP if sample is None else self._answer(i, sample)
        return actions

    def finish_trajectory(self, i: int, trajectory: Trajectory) -> Trajectory:
        """``trajectory`` with each step's sampled token ids and log-probs, the observation tokens
        that followed it (``metadata.observation_token_ids``), a malformed call flagged
        (``metadata.format_error``) and the first prompt's ids (``metadata.prompt_token_ids``)."""
        record = self.records[i]
        spans = record.step_spans
        if not spans:
            return trajectory
        steps = []
        for j, step in enumerate(trajectory.steps[: len(spans)]):
            start, end = spans[j]
            following = spans[j + 1][0] if j + 1 < len(spans) else len(record.token_ids)
            metadata = {**step.metadata, "observation_token_ids": record.token_ids[end:following]}
            if record.format_errors[j]:  # the parser's message, recorded from the action; True for a refusal
                metadata.setdefault("format_error", True)
            update = {"token_ids": record.token_ids[start:end], "logprobs": record.logprobs[start:end]}
            steps.append(step.model_copy(update={**update, "metadata": metadata}))
        metadata = {**trajectory.metadata, "prompt_token_ids": record.token_ids[: spans[0][0]]}
        recorded = trajectory.model_copy(update={"steps": steps, "metadata": metadata})
        return Trajectory.model_validate(_unicode_safe(recorded.model_dump()))

    # -- one turn ---------------------------------------------------------------------------

    def _add_observation(self, i: int, observation: Any) -> bool:
        """Append the observation's tokens; False when the next answer would not fit the budget."""
        record, budget = self.records[i], self.max_episode_tokens
        chat = self._chats[i]
        if chat is None:  # the first observation: the task
            task = self.tasks[i]
            system = self.system_prompt
            if system is None:
                system = (task.metadata.get("system_prompt") if task else None) or None
            tools = self.episode_tools[i] if self.include_tools else None
            chat = self._chats[i] = ChatTokens(self.tokenizer, system_prompt=system, tools=tools)
            first = observation if _is_chat(observation) else [observation_message(observation, None)]
            record.extend(chat.prompt(first), sampled=False)
            if budget is not None and len(record.token_ids) + self.max_new_tokens > budget:
                raise ValueError(
                    f"task {(task.id if task else '') or f'#{i}'}: the first prompt has {len(record.token_ids)} "
                    f"tokens; max_episode_tokens={budget} leaves no room for an answer of {self.max_new_tokens}"
                )
            return True
        start, end = record.step_spans[-1]
        following = chat.continuation(record.token_ids[start:end], observation_message(observation, self._styles[i]))
        if budget is not None and len(record.token_ids) + len(following) + self.max_new_tokens > budget:
            record.finish = "token_budget"  # the observation and another answer would not fit
            return False
        record.extend(following, sampled=False)
        return True

    def _generate(self, asking: list[int]) -> list[TokenSample | None]:
        """One answer per episode in ``asking`` (None for an episode the generator failed)."""
        if not asking:
            return []
        try:
            samples = self.generator.generate(
                [self.records[i].token_ids for i in asking],
                max_new_tokens=self.max_new_tokens,
                temperature=self.temperature,
                top_p=self.top_p,
            )
            if len(samples) != len(asking):
                raise GenerationError(f"{len(samples)} answers to {len(asking)} prompts")
        except Exception as exc:  # the backend failed every episode waiting on it
            for i in asking:
                self.records[i].fail(exc)
            return [None] * len(asking)
        out: list[TokenSample | None] = []
        for i, sample in zip(asking, samples):
            try:
                check_sample(sample, self.vocab_size)
            except GenerationError as exc:  # the backend's answer, not the policy's
                self.records[i].fail(exc)
                sample = None
            out.append(sample)
        return out

    def _answer(self, i: int, sample: TokenSample) -> dict[str, Any]:
        record = self.records[i]
        start = len(record.token_ids)
        record.extend(sample.token_ids, sampled=True, logprobs=sample.logprobs)
        record.step_spans.append((start, len(record.token_ids)))
        if sample.entropy is not None:
            record.entropies.append(sample.entropy)
        text = self.tokenizer.decode(sample.token_ids, skip_special_tokens=True)
        reply = parse_reply(text, self.episode_tools[i], closing_tool=self.closing_tool)
        record.format_errors.append("format_error" in reply.action)
        self._styles[i] = answer_style(reply)
        return reply.action


def _is_chat(observation: Any) -> bool:
    return (
        isinstance(observation, list)
        and bool(observation)
        and all(isinstance(m, dict) and "role" in m for m in observation)
    )


def _unicode_safe(value: Any) -> Any:
    """``value`` with each lone UTF-16 surrogate in its strings written as its ``\\udXXX`` escape.

    A policy writes one as a JSON escape in a tool argument (and an environment may echo it);
    it is no Unicode text, so the trajectory file (UTF-8) and the process reward could not take it.
    """
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_unicode_safe(k): _unicode_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unicode_safe(v) for v in value]
    return value
