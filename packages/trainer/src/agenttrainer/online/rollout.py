"""Batched multi-turn rollouts that keep every token: ``collect_rollouts``.

``G`` episodes per task run in lockstep in live environments, played by knowlyr-core's acting
loop (``knowlyrcore.rollout.play_episodes``, shared with knowlyr-hub's ``collect``) with
the local policy (``agenttrainer.acting.TokenPolicy``, the one ``knowlyr-hub evaluate`` acts
through): each turn, every live episode's token ids go to the generator in ONE call, each
sampled answer is parsed into an action by the rules every knowlyr policy shares
(``knowlyrcore.tool_parsing``), and each environment steps.

Each ``Rollout`` keeps the token ids of the whole episode (prompt, answers, observations), a
mask of the tokens the model sampled, their log-probs at sampling time, and each step's span,
so the trainer scores exactly what was sampled. An episode ends when the environment
terminates or truncates it (after ``max_steps`` answers, or the task's own ``max_steps`` when
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

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agenttrainer.acting.generators import Generator
from agenttrainer.acting.policy import TokenPolicy, TokenRecord
from knowlyrcore import AgentEnv, TaskInfo, TimeStep, Trajectory
from knowlyrcore.errors import InfrastructureError, InvalidActionError
from knowlyrcore.rollout import Episode, build_env, env_tools, play_episodes
from knowlyrcore.wrappers import MaxStepsWrapper, RecorderWrapper

# What out of an environment's step is not the agent's doing: the machinery around the episode
# failed (the sandbox, a remote environment's connection), and the episode is masked.
INFRASTRUCTURE_ERRORS = (InfrastructureError, ConnectionError, TimeoutError)


@dataclass(kw_only=True)
class Rollout(TokenRecord):
    """One episode as the trainer sees it (token level) and as knowlyr records it (``trajectory``).

    ``finish`` is terminated | truncated | max_steps | token_budget | action_error | infra_error.
    """

    task: TaskInfo
    group: int  # index of the task in this batch; the G rollouts of a task share it
    env_reward: float = 0.0
    success: bool | None = None
    trajectory: Trajectory | None = None
    step_rewards: list[float] = dataclasses.field(default_factory=list)  # process rewards, filled by the trainer
    reward: float = 0.0  # the scalar the advantages are computed from, filled by the trainer

    @property
    def valid(self) -> bool:
        """Whether the rollout may enter the update (it did not fail for infrastructure reasons)."""
        return self.infra_error is None and bool(self.step_spans)


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
    max_steps: int = 8,
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
    if group_size < 1 or max_steps < 1 or max_new_tokens < 1:
        raise ValueError("group_size, max_steps and max_new_tokens must be >= 1")
    task_list = [TaskInfo.coerce(t) for t in tasks]
    rollouts = [Rollout(task=t, group=g) for g, t in enumerate(task_list) for _ in range(group_size)]
    playing: list[int] = []  # the rollouts whose environment was built
    envs: list[RecorderWrapper] = []
    try:
        for i, rollout in enumerate(rollouts):
            try:
                # As evaluation does: the episode ends at max_steps or the task's own, if smaller.
                instance = MaxStepsWrapper(build_env(env, env_kwargs), max_steps=max_steps)
            except Exception as exc:  # the environment could not start: not the agent's doing
                rollout.fail(exc)
                continue
            envs.append(RecorderWrapper(instance, agent_name="online-rl", model_name=model_name))
            playing.append(i)
        policy = TokenPolicy(
            generator,
            tokenizer,
            system_prompt=system_prompt,
            tools=env_tools(envs[0]) if envs else None,  # as built; each episode's own follow (ToolWatch)
            include_tools=include_tools,
            closing_tool=closing_tool,
            max_new_tokens=max_new_tokens,
            max_episode_tokens=max_episode_tokens,
            temperature=temperature,
            top_p=top_p,
            vocab_size=vocab_size,
        )
        step_errors = _StepErrors([rollouts[i] for i in playing], policy)
        episodes = play_episodes(
            envs,
            policy,
            [rollouts[i].task for i in playing],
            [None if seed is None else seed + i for i in playing],
            max_steps=max_steps,
            on_step_error=step_errors,
            on_reset_error=lambda k, exc: rollouts[playing[k]].fail(exc),  # not the agent's doing
            after_turn=None if on_turn is None else lambda turn, live: on_turn(turn, live) if turn else None,
        )
    finally:
        for recorder in envs:
            try:
                recorder.close()
            except Exception:  # closing must not mask the rollout's result
                pass
    for k, (i, episode) in enumerate(zip(playing, episodes)):
        _fill(rollouts[i], policy.records[k], episode)
    return rollouts


class _StepErrors:
    """``on_step_error`` of online RL: what an exception out of an environment's ``step`` means."""

    def __init__(self, rollouts: list[Rollout], policy: TokenPolicy) -> None:
        self.rollouts, self.policy = rollouts, policy

    def __call__(self, k: int, env: RecorderWrapper, action: Any, exc: Exception) -> TimeStep:
        rollout, record = self.rollouts[k], self.policy.records[k]
        if isinstance(exc, InvalidActionError):  # the environment refused the call: the agent's mistake
            env.record_refused(action, str(exc))
            record.format_errors[-1] = True
            return TimeStep(observation=f"Error: {exc}")
        if isinstance(exc, INFRASTRUCTURE_ERRORS):  # the environment's machinery broke: not the agent's doing
            rollout.fail(exc)
            return TimeStep(terminated=True)
        # the environment could not take this action: the agent's failure, scored 0
        env.record_refused(action, f"{type(exc).__name__}: {exc}"[:500])
        record.format_errors[-1] = True
        rollout.success, rollout.finish = False, "action_error"
        return TimeStep(terminated=True)


def _fill(rollout: Rollout, record: TokenRecord, episode: Episode) -> None:
    """``rollout`` from its tokens (the policy's record) and how its episode went (the loop's)."""
    own = (rollout.finish, rollout.infra_error)  # set while playing: an environment that failed
    for f in dataclasses.fields(TokenRecord):
        setattr(rollout, f.name, getattr(record, f.name))
    if own[0]:
        rollout.finish, rollout.infra_error = own
    rollout.env_reward = 0.0 if rollout.finish == "action_error" else episode.reward
    if not rollout.finish:
        rollout.finish = episode.end
        if episode.end in ("terminated", "truncated") and "success" in episode.info and episode.turns:
            rollout.success = bool(episode.info["success"])
    if rollout.infra_error is None and rollout.step_spans and episode.trajectory is not None:
        metadata = {**episode.trajectory.metadata, "finish": rollout.finish}
        rollout.trajectory = episode.trajectory.model_copy(update={"metadata": metadata})
