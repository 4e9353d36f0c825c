"""``collect_batched()``: episodes in lockstep, so a batch policy acts for all of them per turn.

``collect()`` runs episodes one by one (or in threads), calling the agent once per step of each
episode. A local model is faster when it generates for many conversations in one batch, so here
the episodes of a chunk of ``batch_size`` tasks advance together: at every turn the policy gets
one observation per episode (``None`` for an episode that has ended) and returns one action per
episode through ``act_batch`` (knowlyr-core's ``BatchPolicy``, e.g. the trainer's local policy,
``agenttrainer.acting.TokenPolicy``, which generates for every live episode in one call and keeps
each episode's keys and values cached across turns); every live environment then takes its step. A per-episode agent factory
works too (``as_batch_policy`` calls one fresh agent per episode in turn), and gives the same
trajectories as ``collect()`` with that factory.

When an episode's environment offers other tools than it did as built (per task, or from a
later turn on: see ``knowlyrcore.rollout.ToolWatch``), the policy is told before it acts: a
batch policy through ``set_tools_batch(tools_batch)`` (one entry per episode, None where that
episode's tools did not change), each per-episode agent through ``set_tools(tools)``.

Environments are built and wrapped as ``collect()`` does (registry id or factory;
``MaxStepsWrapper`` -> ``RewardWrapper`` -> ``RecorderWrapper``), played by knowlyr-core's acting
loop (``knowlyrcore.rollout.play_episodes``) and always closed, also when a step or the policy raises. Each finished chunk is appended to ``output_path`` atomically, so
a failure in a later chunk keeps the earlier ones.

The progress bar counts finished episodes, which stay at 0 for the many turns the first
episodes take; its postfix shows the turn being played, the live and the finished episodes
(``turn 3/30, 61 live, 3 finished``, and ``chunk 2/4`` when there are several chunks).

Examples:
    >>> from knowlyrcore import AgentEnv, TimeStep
    >>> class Countdown(AgentEnv):
    ...     def reset(self, *, task=None, seed=None):
    ...         self.left = int(task.metadata["n"])
    ...         return TimeStep(f"{self.left} to go")
    ...     def step(self, action):
    ...         self.left -= 1
    ...         return TimeStep(f"{self.left} to go", terminated=self.left == 0)
    >>> class Tick:
    ...     def reset_batch(self, tasks): self.turns = []
    ...     def act_batch(self, observations):
    ...         self.turns.append(observations)
    ...         return [None if o is None else {"tool": "tick", "params": {}} for o in observations]
    >>> policy = Tick()
    >>> trajectories = collect_batched(Countdown, policy, [{"metadata": {"n": 1}}, {"metadata": {"n": 2}}], progress=False)
    >>> [len(t.steps) for t in trajectories], policy.turns
    ([1, 2], [['1 to go', '2 to go'], [None, '1 to go']])
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

from knowlyrcore import AgentEnv, TaskInfo, Trajectory, write_trajectories
from knowlyrcore.policy import BatchPolicy, as_batch_policy
from knowlyrcore.rollout import build_env, play_episodes, wrap_episode_env
from trajectoryhub.rollout import end_on_env_error, progress_bar, recorded_trajectories


def collect_batched(
    env: str | Callable[..., AgentEnv],
    policy: Any,
    tasks: Sequence[Any],
    *,
    max_steps: int = 30,
    reward_fn: Callable | None = None,
    agent_name: str = "agent",
    model_name: str = "",
    env_kwargs: dict[str, Any] | None = None,
    seed: int | None = None,
    batch_size: int = 64,
    output_path: str | os.PathLike | None = None,
    progress: bool = True,
    record_env_errors: bool = False,
) -> list[Trajectory]:
    """One trajectory per task, in task order; episodes run in lockstep chunks of ``batch_size``.

    ``policy`` is a ``BatchPolicy`` or a factory of per-episode agents. ``env`` is a registered
    environment id or a factory; ``seed`` seeds episode ``i`` with ``seed + i``. An exception
    from an environment's ``step`` propagates, or with ``record_env_errors`` ends only that
    episode, recorded as failed (``trajectoryhub.rollout.env_error_trajectory``).
    """
    if max_steps < 1 or batch_size < 1:
        raise ValueError("max_steps and batch_size must be >= 1")
    task_list = [TaskInfo.coerce(t) for t in tasks]
    if not task_list:
        raise ValueError("collect_batched() needs at least one task")
    batch_policy = as_batch_policy(policy)
    options = dict(max_steps=max_steps, reward_fn=reward_fn, agent_name=agent_name, model_name=model_name)
    kwargs = dict(env_kwargs or {})

    bar = progress_bar(len(task_list), progress)
    n_chunks = -(-len(task_list) // batch_size)
    results: list[Trajectory] = []
    try:
        for start in range(0, len(task_list), batch_size):
            chunk = task_list[start : start + batch_size]
            seeds = [None if seed is None else seed + start + k for k in range(len(chunk))]
            where = f"chunk {start // batch_size + 1}/{n_chunks}, " if n_chunks > 1 else ""

            def show_turn(turn: int, live: int, where: str = where) -> None:
                bar.set_postfix_str(f"{where}turn {turn}/{max_steps}, {live} live, {bar.n} finished", refresh=True)

            trajectories = _run_lockstep(
                env,
                kwargs,
                batch_policy,
                chunk,
                seeds,
                options,
                advance=bar.update,
                show_turn=show_turn,
                record_env_errors=record_env_errors,
            )
            if output_path is not None:
                write_trajectories(output_path, trajectories, append=True)
            results.extend(trajectories)
    finally:
        bar.close()
    return results


def _run_lockstep(
    env: str | Callable[..., AgentEnv],
    env_kwargs: dict[str, Any],
    policy: BatchPolicy,
    tasks: list[TaskInfo],
    seeds: list[int | None],
    options: dict[str, Any],
    *,
    advance: Callable[[int], Any],
    show_turn: Callable[[int, int], Any],
    record_env_errors: bool = False,
) -> list[Trajectory]:
    """Play one episode per task together until every one has ended; returns them in order.

    ``advance(n)`` is told whenever ``n`` more episodes have ended, ``show_turn(turn, live)``
    before the policy acts in each turn (the progress bar)."""
    with ExitStack() as closing:  # every environment built so far is closed, whatever happens
        recorders = []
        for _ in tasks:
            instance = build_env(env, env_kwargs)
            closing.callback(instance.close)
            recorders.append(wrap_episode_env(instance, **options))
        running = len(tasks)

        def ended(turn: int, live: int) -> None:
            nonlocal running
            advance(running - live)
            running = live

        episodes = play_episodes(
            recorders,
            policy,
            tasks,
            seeds,
            on_step_error=end_on_env_error if record_env_errors else None,
            before_turn=show_turn,
            after_turn=ended,
        )
        return recorded_trajectories(episodes)
