"""The policy protocol: what acts in an ``AgentEnv``.

A ``Policy`` plays one episode at a time: ``reset(task)`` starts an episode (the task is
passed so scripted or oracle policies can use it; model policies ignore it) and
``policy(observation)`` returns the next action ``{"tool", "params"[, "thought"]}``.

A ``BatchPolicy`` plays many episodes in lockstep, so a local model can generate one batch per
turn for every live episode instead of one sequence at a time: ``reset_batch(tasks)`` starts
``len(tasks)`` episodes, and ``act_batch(observations)`` takes one observation per episode
(``None`` for an episode that has ended) and returns one action per episode (``None`` where
the observation was ``None``).

A batch policy that cannot go on with a live episode (its token budget is spent, its generation
backend failed) returns ``STOP`` for it: the episode ends there, recorded as far as it got. One
that keeps per-episode records of its own (the token ids it sampled) may define
``finish_trajectory(i, trajectory)``: the acting loop (``knowlyrcore.rollout.play_episodes``)
hands it episode ``i``'s recorded trajectory and keeps what it returns.

``as_batch_policy`` lifts any per-episode policy into a ``BatchPolicy`` (one policy object per
episode, called in turn), so runners only need to speak the batched protocol.

Chat-model policies (a local checkpoint, an OpenAI-compatible endpoint) share one set of rules:
a reply becomes an action by ``knowlyrcore.tool_parsing`` (native tool calls, ``<tool_call>``
blocks, ``Thought:/Action:`` text, JSON call objects; unusable arguments give ``params={}`` and a
``format_error``; a reply without a call becomes the closing tool), and ``ChatTranscript``
threads an endpoint policy's conversation. ``knowlyrcore.testing.PolicyConformance`` is the
suite every such policy passes.

Examples:
    >>> class Echo:
    ...     def reset(self, task=None): self.turn = 0
    ...     def __call__(self, observation): return {"tool": "respond", "params": {"message": observation}}
    >>> isinstance(Echo(), Policy)
    True
    >>> batch = as_batch_policy(Echo)
    >>> batch.reset_batch([None, None])
    >>> batch.act_batch(["hi", None])
    [{'tool': 'respond', 'params': {'message': 'hi'}}, None]
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from knowlyrcore.actions import Action
from knowlyrcore.models import TaskInfo
from knowlyrcore.recording import observation_text


@runtime_checkable
class Policy(Protocol):
    """One episode's agent: ``reset(task)`` at the start, then one action per observation."""

    def reset(self, task: TaskInfo | None = None) -> None: ...

    def __call__(self, observation: Any) -> Action: ...


class _Stop:
    """The type of ``STOP`` (one instance, so ``action is STOP`` tells it apart)."""

    def __repr__(self) -> str:
        return "STOP"


#: What ``act_batch`` returns for a live episode the policy ends (see the module docs).
STOP: Any = _Stop()


@runtime_checkable
class BatchPolicy(Protocol):
    """Acts for many episodes at once (one model call per turn for all live episodes)."""

    def reset_batch(self, tasks: Sequence[TaskInfo | None]) -> None: ...

    def act_batch(self, observations: Sequence[Any | None]) -> list[Action | None]: ...


def reset_policy(policy: Any, task: TaskInfo | None) -> None:
    """Call ``policy.reset``, passing the task when its signature takes one.

    Older agents define ``reset(self)`` with no task; they keep working.
    """
    reset = getattr(policy, "reset", None)
    if reset is None:
        return
    try:
        parameters = inspect.signature(reset).parameters
    except (TypeError, ValueError):  # builtins without a signature
        reset()
        return
    if "task" in parameters:
        reset(task=task)
    elif any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters.values()):
        reset(task)
    else:
        reset()


class SequentialBatchPolicy:
    """A ``BatchPolicy`` made of one per-episode policy per episode, called one after another."""

    def __init__(self, factory: Callable[[], Any]):
        self.factory = factory
        self.policies: list[Any] = []

    def reset_batch(self, tasks: Sequence[TaskInfo | None]) -> None:
        self.policies = [self.factory() for _ in tasks]
        for policy, task in zip(self.policies, tasks):
            reset_policy(policy, task)

    def act_batch(self, observations: Sequence[Any | None]) -> list[Action | None]:
        if len(observations) != len(self.policies):
            raise ValueError(f"act_batch got {len(observations)} observations for {len(self.policies)} episodes")
        return [None if obs is None else policy(obs) for policy, obs in zip(self.policies, observations)]


def as_batch_policy(policy_or_factory: Any) -> BatchPolicy:
    """A ``BatchPolicy`` as it is, else a factory of per-episode policies wrapped sequentially.

    Pass a factory (a class or a function returning a fresh policy), not a policy instance:
    episodes in a batch must not share one conversation.
    """
    if isinstance(policy_or_factory, BatchPolicy):
        return policy_or_factory
    if not callable(policy_or_factory):
        raise TypeError(f"expected a BatchPolicy or a policy factory, got {type(policy_or_factory).__name__}")
    return SequentialBatchPolicy(policy_or_factory)


class ChatTranscript:
    """One episode's messages for a policy behind an OpenAI-style chat endpoint.

    The threading rules: the first observation, and every observation after a turn without a
    native tool call, goes in as a ``user`` message; after a native call (its action carries the
    call's ``id``) the observation answers it as a ``tool`` message with that ``tool_call_id``.
    The assistant turn keeps only the call that was executed, since the environment runs one
    action per step and an endpoint rejects calls left unanswered. Observations that are not
    strings are sent as JSON.

    Examples:
        >>> transcript = ChatTranscript("Be brief.")
        >>> transcript.add_observation("list the files")
        >>> call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
        >>> transcript.add_reply({"content": "", "tool_calls": [call]}, {"tool": "bash", "params": {}, "id": "c1"})
        >>> transcript.add_observation({"output": "a.py"})
        >>> [m["role"] for m in transcript.messages], transcript.messages[-1]
        (['system', 'user', 'assistant', 'tool'], {'role': 'tool', 'tool_call_id': 'c1', 'content': '{"output": "a.py"}'})
        >>> transcript.reset(); transcript.messages
        [{'role': 'system', 'content': 'Be brief.'}]
    """

    def __init__(self, system_prompt: str | None = None):
        self.system_prompt = system_prompt
        self.messages: list[dict[str, Any]] = []
        self.pending_call_id: str | None = None
        self.reset()

    def reset(self) -> None:
        """Forget the episode: back to the system prompt alone."""
        self.messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        self.pending_call_id = None

    def add_observation(self, observation: Any) -> None:
        """Append what the environment returned (the task itself on the first turn)."""
        text = observation_text(observation)
        if self.pending_call_id is None:
            self.messages.append({"role": "user", "content": text})
        else:
            self.messages.append({"role": "tool", "tool_call_id": self.pending_call_id, "content": text})
        self.pending_call_id = None

    def add_reply(self, message: Mapping[str, Any], action: Mapping[str, Any]) -> None:
        """Append the assistant turn ``message`` that ``action`` was taken from."""
        content = message.get("content")
        call_id = action.get("id")
        if not call_id:
            self.messages.append({"role": "assistant", "content": content or ""})
            return
        native = [c for c in message.get("tool_calls") or [] if isinstance(c, Mapping)]
        raw = next((c for c in native if c.get("id") == call_id), native[0] if native else {})
        arguments = (raw.get("function") or {}).get("arguments", action.get("params", {}))
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        function = {"name": action["tool"], "arguments": arguments}
        self.messages.append(
            {
                "role": "assistant",
                "content": content,
                "tool_calls": [{"id": call_id, "type": "function", "function": function}],
            }
        )
        self.pending_call_id = call_id


class SolutionReplay:
    """The scripted expert of a task suite: plays back ``task.metadata.solution`` one action per turn.

    Suites store each task's ground-truth tool calls there (as tau-bench stores task actions);
    environments never show metadata to the policy, so only this oracle sees them.

    Examples:
        >>> expert = SolutionReplay()
        >>> expert.reset({"id": "t1", "metadata": {"solution": [{"tool": "respond", "params": {"message": "hi"}}]}})
        >>> expert("hello?")
        {'tool': 'respond', 'params': {'message': 'hi'}}
    """

    def __init__(self) -> None:
        self.actions: list[dict[str, Any]] = []
        self.turn = 0

    def reset(self, task: TaskInfo | dict | None = None) -> None:
        info = TaskInfo.coerce(task)
        solution = info.metadata.get("solution")
        if not isinstance(solution, list) or not solution or not all(isinstance(a, dict) for a in solution):
            raise ValueError(f"task {info.id!r} has no metadata.solution (a list of actions) to replay")
        self.actions = [dict(action) for action in solution]
        self.turn = 0

    def __call__(self, observation: Any) -> Action:
        if self.turn >= len(self.actions):
            raise ValueError("the solution is exhausted but the episode has not ended")
        action = self.actions[self.turn]
        self.turn += 1
        return action  # type: ignore[return-value]
