"""``collect()``: roll a policy out in an environment and record the trajectories.

Each episode gets its own environment (built from the registry id or a factory) wrapped in
``MaxStepsWrapper`` -> ``RewardWrapper`` (when a reward function is given) ->
``RecorderWrapper``, so what is recorded is exactly what the agent saw, and is played by
knowlyr-core's acting loop (``knowlyrcore.rollout.play_episodes``, which online RL shares). Episodes run
concurrently in threads (``concurrency``): environment steps are I/O bound (containers,
processes, HTTP policies), so threads overlap them without copying the policy.

An agent is a callable ``agent(observation) -> {"tool", "params"[, "thought"]}``. If it has a
``reset`` method it is called at the start of each episode, with the task when it takes one
(``knowlyrcore.policy.reset_policy``); with ``concurrency > 1`` pass ``agent_factory`` (a
callable returning a fresh agent) unless the agent is stateless. ``collect_batched``
(``trajectoryhub.batched``) runs episodes in lockstep instead, for policies that act in batches.

Some environments offer each task its own tools (BFCL: the task's functions), and some change
them during an episode (BFCL multi-turn adds withheld functions at a later turn). A policy is
built with the tools of a fresh environment, so whenever the episode's environment offers
different ones (after ``reset`` or a step) an agent with ``set_tools(tools)`` is handed their
OpenAI schemas (``knowlyrcore.rollout.ToolWatch``), and the trajectory's ``metadata["tools"]`` keeps every tool
offered in the episode, for export. Environments whose tools never change see neither.

Examples:
    >>> from knowlyrcore import AgentEnv, TimeStep
    >>> class Coin(AgentEnv):
    ...     def reset(self, *, task=None, seed=None): return TimeStep("flip?")
    ...     def step(self, action): return TimeStep("heads", reward=1.0, terminated=True, info={"success": True})
    ...     @property
    ...     def available_tools(self): return ["flip"]
    >>> trajectories = collect(Coin, agent=lambda obs: {"tool": "flip", "params": {}}, n_episodes=3, progress=False)
    >>> [len(t.steps) for t in trajectories], trajectories[0].outcome.success
    ([1, 1, 1], True)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from knowlyrcore import AgentEnv, InfrastructureError, TaskInfo, TimeStep, Trajectory, write_trajectories
from knowlyrcore.policy import as_batch_policy
from knowlyrcore.rollout import build_env as _build_env
from knowlyrcore.rollout import play_episodes, wrap_episode_env
from knowlyrcore.wrappers import RecorderWrapper
from trajectoryhub.ray_executor import INFRASTRUCTURE_FAILURE

Agent = Callable[[Any], dict[str, Any]]


#: ``outcome.exit_status`` and ``metadata`` key of an episode whose environment raised on an action.
ENV_ERROR = "env_error"


def env_error_trajectory(recorder: RecorderWrapper, action: Any, exc: Exception) -> Trajectory:
    """The record of an episode whose environment raised on the policy's ``action``: a failed
    episode with reward 0, the action as its last step and ``metadata.env_error`` saying why.

    The action caused it, so it is the policy's failure and counts as one. An
    ``InfrastructureError`` (a sandbox that died, ...) says it is not the agent's doing: it is
    recorded the same way under ``infrastructure_failure``, as the Ray executor records a worker
    that kept dying, and still counts as a failure.
    """
    _record_refused(recorder, exc, action)
    return _as_env_error(recorder.get_trajectory(), exc)


def _record_refused(recorder: RecorderWrapper, exc: Exception, action: Any) -> None:
    try:
        recorder.record_refused(action, f"the environment raised {_reason(exc)}")
    except ValueError:  # not even a tool call: there is no step to show it as
        pass


def _reason(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return type(exc).__name__ + (f": {lines[0][:300]}" if lines else "")


def _as_env_error(recorded: Trajectory, exc: Exception) -> Trajectory:
    kind = INFRASTRUCTURE_FAILURE if isinstance(exc, InfrastructureError) else ENV_ERROR
    outcome = recorded.outcome.model_copy(update={"success": False, "exit_status": kind, "terminated": True})
    return recorded.model_copy(
        update={"outcome": outcome, "reward": 0.0, "metadata": {**recorded.metadata, kind: _reason(exc)}}
    )


def end_on_env_error(i: int, recorder: RecorderWrapper, action: Any, exc: Exception) -> TimeStep:
    """``play_episodes``' ``on_step_error`` of evaluation: the episode ends there, its last step the
    refused action (``recorded_trajectories`` then marks it failed, see ``env_error_trajectory``)."""
    _record_refused(recorder, exc, action)
    return TimeStep(observation="", terminated=True)


def recorded_trajectories(episodes: list[Any]) -> list[Trajectory]:
    """The trajectories of ``play_episodes``, an episode ended by ``end_on_env_error`` marked failed."""
    return [e.trajectory if e.error is None else _as_env_error(e.trajectory, e.error) for e in episodes]


def run_episode(
    env: AgentEnv,
    agent: Agent,
    *,
    task: Any = None,
    seed: int | None = None,
    max_steps: int = 30,
    reward_fn: Callable | None = None,
    agent_name: str = "agent",
    model_name: str = "",
    record_env_errors: bool = False,
) -> Trajectory:
    """Run one episode of ``agent`` in ``env`` and return its recorded trajectory.

    An exception from the environment's ``step`` propagates, or with ``record_env_errors`` ends
    the episode as ``env_error_trajectory`` (an evaluation scores it a failure and goes on).
    """
    recorder = wrap_episode_env(
        env, max_steps=max_steps, reward_fn=reward_fn, agent_name=agent_name, model_name=model_name
    )
    episodes = play_episodes(
        [recorder],
        as_batch_policy(lambda: agent),
        [task],
        [seed],
        on_step_error=end_on_env_error if record_env_errors else None,
    )
    return recorded_trajectories(episodes)[0]


def collect(
    env: str | Callable[..., AgentEnv],
    agent: Agent | None = None,
    *,
    n_episodes: int = 1,
    tasks: Sequence[Any] | None = None,
    max_steps: int = 30,
    reward_fn: Callable | None = None,
    concurrency: int = 1,
    agent_factory: Callable[[], Agent] | None = None,
    agent_name: str = "agent",
    model_name: str = "",
    env_kwargs: dict[str, Any] | None = None,
    seed: int | None = None,
    output_path: str | os.PathLike | None = None,
    progress: bool = True,
    executor: str = "thread",
    ray_address: str | None = None,
    record_env_errors: bool = False,
) -> list[Trajectory]:
    """Collect ``n_episodes`` trajectories (cycling through ``tasks`` when given), in order.

    ``tasks=None`` runs every episode on the environment's own default (``reset(task=None)``),
    for environments that need no task; an empty ``tasks`` is an error, not that default.
    ``env`` is a registered environment id or a factory. ``seed`` seeds episode ``i`` with
    ``seed + i``. Trajectories are appended atomically to ``output_path`` when given. An
    exception in any episode propagates after the running episodes finish (with
    ``record_env_errors``, one from an environment's ``step`` ends only its episode, recorded
    as failed: see ``run_episode``); environments are always closed. ``executor="ray"`` runs
    the episodes on ``concurrency`` Ray actors, each reusing one environment
    (``trajectoryhub.ray_executor``; ``ray_address`` names a cluster, default: start a local
    runtime), with the same tasks, seeds and order.
    """
    if executor not in ("thread", "ray"):
        raise ValueError(f"executor must be 'thread' or 'ray', got {executor!r}")
    if agent is None and agent_factory is None:
        raise ValueError("collect() needs an agent or an agent_factory")
    if n_episodes < 1 or concurrency < 1 or max_steps < 1:
        raise ValueError("n_episodes, concurrency and max_steps must be >= 1")
    # a Ray actor gets its own copy of the agent and runs one episode at a time: sharing is safe
    if executor == "thread" and concurrency > 1 and agent_factory is None and hasattr(agent, "reset"):
        raise ValueError("a stateful agent (it has reset()) cannot be shared across threads: pass agent_factory")
    task_list = [None] if tasks is None else [TaskInfo.coerce(t) for t in tasks]
    if not task_list:
        raise ValueError("collect() got an empty task list: give tasks, or tasks=None for an env that needs none")
    kwargs = dict(env_kwargs or {})

    def one(i: int) -> Trajectory:
        episode_agent = agent_factory() if agent_factory is not None else agent
        instance = _build_env(env, kwargs)
        try:
            return run_episode(
                instance,
                episode_agent,
                task=task_list[i % len(task_list)],
                seed=None if seed is None else seed + i,
                max_steps=max_steps,
                reward_fn=reward_fn,
                agent_name=agent_name,
                model_name=model_name,
                record_env_errors=record_env_errors,
            )
        finally:
            instance.close()

    bar = progress_bar(n_episodes, progress)
    results: list[Trajectory] = []
    try:
        if executor == "ray":
            from trajectoryhub.ray_executor import run_on_ray

            results = run_on_ray(
                env,
                agent=agent,
                agent_factory=agent_factory,
                env_kwargs=kwargs,
                concurrency=concurrency,
                tasks=[task_list[i % len(task_list)] for i in range(n_episodes)],
                seeds=[None if seed is None else seed + i for i in range(n_episodes)],
                options=dict(
                    max_steps=max_steps,
                    reward_fn=reward_fn,
                    agent_name=agent_name,
                    model_name=model_name,
                    record_env_errors=record_env_errors,
                ),
                address=ray_address,
                on_done=lambda: bar.update(1),
            )
        elif concurrency == 1:
            for i in range(n_episodes):
                results.append(one(i))
                bar.update(1)
        else:
            with ThreadPoolExecutor(max_workers=concurrency) as pool:
                futures = [pool.submit(one, i) for i in range(n_episodes)]
                for future in futures:
                    results.append(future.result())
                    bar.update(1)
    finally:
        bar.close()
    if output_path is not None:
        write_trajectories(output_path, results, append=True)
    return results


def progress_bar(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="collect", unit="episode", disable=not enabled)
