"""Batched multi-turn rollouts that keep every token: ``collect_rollouts``.

``G`` episodes per task run in lockstep in live environments: each turn, every live episode's
token ids go to the generator in ONE call, each sampled answer is parsed into an action by the
rules every knowlyr policy shares (``knowlyrcore.tool_parsing``), and each environment steps.

Each ``Rollout`` keeps the token ids of the whole episode (prompt, answers, observations), a
mask of the tokens the model sampled, their log-probs at sampling time, and each step's span,
so the trainer scores exactly what was sampled. An episode ends when the environment
terminates or truncates it (after ``max_turns`` answers, or the task's own ``max_steps`` when
smaller, as in evaluation), or before a turn that would not fit in ``max_episode_tokens``
(``finish`` says which).

A malformed tool call is the agent's mistake: the environment's verdict (or, if the
environment rejects the action outright with ``InvalidActionError``, the error) comes back as
the observation, and the step is counted in ``format_errors``. Any other exception out of the
environment's ``step`` is the agent's too, unless it is an infrastructure failure: the action was
what the environment could not take (a lone surrogate it cannot encode, an argument it chokes
on), and masking it would let a policy dodge a bad grade by breaking the environment. The
episode ends there (``finish="action_error"``) with environment reward 0, the step counted as a
format error, and stays in the update. Only a failure that is not the agent's
(``InfrastructureError``: sandbox crashed, backend timed out; a dropped connection or a timeout;
a generation endpoint that failed or answered with ids that are no tokens, see
``check_sample``) marks the rollout ``infra_error``; the trainer masks it out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agenttrainer.generation import GenerationError, Generator, TokenSample, check_sample
from agenttrainer.inference import answer_style, observation_message
from agenttrainer.online.chat_tokens import ChatTokens
from knowlyrcore import AgentEnv, TaskInfo, Trajectory, make, tool_schemas
from knowlyrcore.errors import InfrastructureError, InvalidActionError
from knowlyrcore.tool_parsing import parse_reply
from knowlyrcore.wrappers import MaxStepsWrapper, RecorderWrapper

# What out of an environment's step is not the agent's doing: the machinery around the episode
# failed (the sandbox, a remote environment's connection), and the episode is masked.
INFRASTRUCTURE_ERRORS = (InfrastructureError, ConnectionError, TimeoutError)


@dataclass
class Rollout:
    """One episode as the trainer sees it (token level) and as knowlyr records it (``trajectory``)."""

    task: TaskInfo
    group: int  # index of the task in this batch; the G rollouts of a task share it
    token_ids: list[int] = field(default_factory=list)
    sampled: list[bool] = field(default_factory=list)  # True where the model produced the token
    logprobs: list[float] = field(default_factory=list)  # sampling-time log-prob (0.0 where not sampled)
    step_spans: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of each answer in token_ids
    format_errors: list[bool] = field(default_factory=list)  # per step
    entropies: list[float] = field(default_factory=list)  # per step: mean sampling entropy (local backend)
    env_reward: float = 0.0
    success: bool | None = None
    finish: str = ""  # terminated | truncated | max_turns | token_budget | action_error | infra_error
    infra_error: str | None = None
    trajectory: Trajectory | None = None
    step_rewards: list[float] = field(default_factory=list)  # process rewards, filled by the trainer
    reward: float = 0.0  # the scalar the advantages are computed from, filled by the trainer

    @property
    def valid(self) -> bool:
        """Whether the rollout may enter the update (it did not fail for infrastructure reasons)."""
        return self.infra_error is None and bool(self.step_spans)

    @property
    def sampled_tokens(self) -> int:
        return sum(self.sampled)

    def extend(self, ids: Sequence[int], *, sampled: bool, logprobs: Sequence[float] | None = None) -> None:
        self.token_ids.extend(ids)
        self.sampled.extend([sampled] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))


def collect_rollouts(
    env: str | Callable[..., AgentEnv],
    tasks: Sequence[Any],
    generator: Generator,
    tokenizer: Any,
    *,
    group_size: int = 1,
    env_kwargs: dict[str, Any] | None = None,
    system_prompt: str | None = None,
    include_tools: bool = True,
    closing_tool: str | None = None,
    max_turns: int = 8,
    max_new_tokens: int = 128,
    max_episode_tokens: int = 2048,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int | None = None,
    model_name: str = "",
    on_turn: Callable[[int, int], None] | None = None,
    vocab_size: int | None = None,
) -> list[Rollout]:
    """``group_size`` rollouts of each task, task-major (``[t0, t0, ..., t1, t1, ...]``).

    ``env`` is a registered id or a factory; ``system_prompt`` (else the task's
    ``metadata['system_prompt']``) opens every chat; with ``include_tools`` the environment's
    tool schemas go into the chat template. ``seed`` seeds episode ``i``'s reset with ``seed + i``.
    ``on_turn(turn, live)`` is called after each turn with the number of episodes still running
    (a progress bar's hook). Every answer must hold token ids below ``vocab_size`` (default: the
    tokenizer's length; the trainer passes its model's embedding rows), else its episode is masked.
    """
    if group_size < 1 or max_turns < 1 or max_new_tokens < 1:
        raise ValueError("group_size, max_turns and max_new_tokens must be >= 1")
    vocab = vocab_size or len(tokenizer)
    task_list = [TaskInfo.coerce(t) for t in tasks]
    rollouts = [Rollout(task=t, group=g) for g, t in enumerate(task_list) for _ in range(group_size)]
    envs: list[RecorderWrapper | None] = [None] * len(rollouts)
    chats: list[ChatTokens | None] = [None] * len(rollouts)
    tools_of: list[list[Any] | None] = [None] * len(rollouts)
    styles: list[str | None] = [None] * len(rollouts)
    live: list[bool] = [False] * len(rollouts)
    try:
        for i, rollout in enumerate(rollouts):
            try:
                instance = make(env, **(env_kwargs or {})) if isinstance(env, str) else env(**(env_kwargs or {}))
                # As evaluation does: the episode ends at max_turns or the task's own max_steps, if smaller.
                instance = MaxStepsWrapper(instance, max_steps=max_turns)
                envs[i] = RecorderWrapper(instance, agent_name="online-rl", model_name=model_name)
                first = envs[i].reset(task=rollout.task, seed=None if seed is None else seed + i)
            except Exception as exc:  # the environment could not start: not the agent's doing
                _fail(rollout, exc)
                continue
            tools = _tool_list(envs[i])
            tools_of[i] = tools
            prompt = system_prompt or rollout.task.metadata.get("system_prompt") or None
            chats[i] = ChatTokens(tokenizer, system_prompt=prompt, tools=tools if include_tools else None)
            rollout.extend(chats[i].prompt(observation_message(first.observation, None)), sampled=False)
            if len(rollout.token_ids) + max_new_tokens > max_episode_tokens:
                raise ValueError(
                    f"task {rollout.task.id or f'#{rollout.group}'}: the first prompt has {len(rollout.token_ids)} tokens; "
                    f"max_episode_tokens={max_episode_tokens} leaves no room for an answer of {max_new_tokens}"
                )
            live[i] = not first.done
            if first.done:
                rollout.finish = "terminated" if first.terminated else "truncated"
        for _turn in range(max_turns):
            active = [i for i in range(len(rollouts)) if live[i]]
            if not active:
                break
            try:
                samples = generator.generate(
                    [rollouts[i].token_ids for i in active],
                    max_new_tokens=max_new_tokens,
                    temperature=temperature,
                    top_p=top_p,
                )
                if len(samples) != len(active):
                    raise GenerationError(f"{len(samples)} answers to {len(active)} prompts")
            except Exception as exc:  # the backend failed every episode waiting on it
                for i in active:
                    _fail(rollouts[i], exc)
                    live[i] = False
                break
            for i, sample in zip(active, samples):
                try:
                    check_sample(sample, vocab)
                except GenerationError as exc:  # the backend's answer, not the policy's: masked
                    _fail(rollouts[i], exc)
                    live[i] = False
                    continue
                live[i] = _take_turn(
                    rollouts[i],
                    envs[i],
                    chats[i],
                    sample,
                    tools_of[i],
                    styles,
                    i,
                    closing_tool,
                    tokenizer,
                    max_new_tokens,
                    max_episode_tokens,
                )
            if on_turn is not None:
                on_turn(_turn + 1, sum(live))
        for i, rollout in enumerate(rollouts):
            if live[i]:
                rollout.finish = "max_turns"
            if envs[i] is not None and rollout.infra_error is None and rollout.step_spans:
                rollout.trajectory = _with_tokens(envs[i].get_trajectory(), rollout)
    finally:
        for recorder in envs:
            if recorder is not None:
                try:
                    recorder.close()
                except Exception:  # closing must not mask the rollout's result
                    pass
    return rollouts


def _take_turn(
    rollout: Rollout,
    env: RecorderWrapper,
    chat: ChatTokens,
    sample: TokenSample,
    tools: list[dict[str, Any]] | None,
    styles: list[str | None],
    i: int,
    closing_tool: str | None,
    tokenizer: Any,
    room: int,
    budget: int,
) -> bool:
    """Append one sampled answer, step the environment; returns whether the episode goes on."""
    start = len(rollout.token_ids)
    rollout.extend(sample.token_ids, sampled=True, logprobs=sample.logprobs)
    rollout.step_spans.append((start, len(rollout.token_ids)))
    if sample.entropy is not None:
        rollout.entropies.append(sample.entropy)
    text = tokenizer.decode(sample.token_ids, skip_special_tokens=True)
    reply = parse_reply(text, tools, closing_tool=closing_tool)
    action = {k: v for k, v in reply.action.items() if k != "format_error"}
    malformed = "format_error" in reply.action
    styles[i] = answer_style(reply)
    try:
        ts = env.step(action)
        observation, done = ts.observation, ts.done
    except InvalidActionError as exc:  # the environment refused the call: the agent's mistake
        observation, done, ts, malformed = f"Error: {exc}", False, None, True
        env.record_refused(action, str(exc))
    except INFRASTRUCTURE_ERRORS as exc:  # the environment's machinery broke: not the agent's doing
        _fail(rollout, exc)
        return False
    except Exception as exc:  # the environment could not take this action: the agent's failure, scored 0
        env.record_refused(action, f"{type(exc).__name__}: {exc}"[:500])
        rollout.format_errors.append(True)
        rollout.env_reward, rollout.success, rollout.finish = 0.0, False, "action_error"
        return False
    rollout.format_errors.append(malformed)
    if ts is not None:
        rollout.env_reward += float(ts.reward)
        if ts.done:
            rollout.finish = "terminated" if ts.terminated else "truncated"
            if "success" in ts.info:
                rollout.success = bool(ts.info["success"])
    if done:
        return False
    following = chat.continuation(sample.token_ids, observation_message(observation, styles[i]))
    if len(rollout.token_ids) + len(following) + room > budget:
        rollout.finish = "token_budget"  # the observation and another answer would not fit
        return False
    rollout.extend(following, sampled=False)
    return True


def _fail(rollout: Rollout, exc: BaseException) -> None:
    rollout.infra_error = f"{type(exc).__name__}: {exc}"[:500]
    rollout.finish = "infra_error"


def _tool_list(env: AgentEnv) -> list[dict[str, Any]] | None:
    """The environment's tools as OpenAI schemas (described by its domain profile)."""
    try:
        tools = env.available_tools
    except Exception:  # an environment without a tool list: the model is told none
        return None
    return tool_schemas(list(tools), env.domain) if tools else None


def _with_tokens(trajectory: Trajectory, rollout: Rollout) -> Trajectory:
    """The recorded trajectory with each step's sampled token ids and log-probs, the observation
    tokens that followed it, and the first prompt's ids, so the token sequence is reproducible."""
    steps = []
    spans = rollout.step_spans
    for j, step in enumerate(trajectory.steps):
        if j >= len(spans):
            break
        start, end = spans[j]
        following = spans[j + 1][0] if j + 1 < len(spans) else len(rollout.token_ids)
        metadata = {**step.metadata, "observation_token_ids": rollout.token_ids[end:following]}
        if rollout.format_errors[j]:
            metadata["format_error"] = True
        steps.append(
            step.model_copy(
                update={
                    "token_ids": rollout.token_ids[start:end],
                    "logprobs": rollout.logprobs[start:end],
                    "metadata": metadata,
                }
            )
        )
    metadata = {**trajectory.metadata, "prompt_token_ids": rollout.token_ids[: spans[0][0]], "finish": rollout.finish}
    recorded = trajectory.model_copy(update={"steps": steps, "metadata": metadata})
    return Trajectory.model_validate(_unicode_safe(recorded.model_dump()))


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
