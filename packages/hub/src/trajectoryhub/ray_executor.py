"""``collect(..., executor="ray")``: episodes as Ray actors, one environment per actor.

Each of ``concurrency`` actors builds its environment once and runs one episode at a time on it
(``reset`` starts each episode afresh), so the cost of a sandbox or a database is paid per actor,
not per episode. Episode ``i`` gets the same task and seed as under the thread executor, and
the results are returned in episode order, so a run is reproducible whichever executor ran it.

Failures are told apart: an exception raised by the agent or the environment is a bug and
propagates as it does with threads (with ``record_env_errors``, as evaluation runs, one from an
environment's ``step`` is the policy's failed episode instead: ``rollout.run_episode``); a
worker that dies (killed, out of memory, its node lost) is infrastructure — its episode is
retried once on a fresh actor, and if that dies too the episode is recorded as an
infrastructure failure (no steps, ``outcome.exit_status`` and ``metadata.infrastructure_failure``
saying why) so one bad node does not stop a long run.

A Ray runtime is started only if none is running, and shut down again at the end only if it
was started here: ``ray.init(address=...)`` joins the cluster named by ``address`` (or by
``RAY_ADDRESS``); without either, a fresh single-machine runtime starts whose GCS, raylet,
workers and agents listen on 127.0.0.1 only and whose workers run at the caller's priority
(``start_local_runtime``).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Sequence
from typing import Any

from knowlyrcore import InfrastructureError, Outcome, TaskInfo, Trajectory
from knowlyrcore.errors import require_extra

INFRASTRUCTURE_FAILURE = "infrastructure_failure"
#: Ray's settings for the runtime ``start_local_runtime`` starts. Ray lowers its workers' priority
#: by ``worker_niceness`` (15 by default) so that its own daemons stay responsive on a busy
#: cluster node; on the caller's machine the workers run the episodes, which are the job, so any
#: other busy process starved them (an actor's first import took 8 s instead of 1 s beside one
#: CPU-bound process on 2 cores). 0 runs them at the priority ``collect`` was started with.
#: ``ray.init`` adds its session's keys to the dict it is given, so it gets a copy.
LOCAL_RUNTIME_CONFIG = {"worker_niceness": 0}


def _import_ray() -> Any:
    return require_extra("ray", "knowlyr-hub", "ray", "executor='ray'")


def start_local_runtime(ray: Any) -> None:
    """Start a single-machine Ray runtime that listens on loopback only.

    Ray binds its servers (GCS, raylet, object manager, workers, runtime-env agent) to the node's
    IP, or to every interface for a non-loopback one; on Linux ``ray.init`` swaps a loopback
    ``_node_ip_address`` for the host's address unless it thinks multi-node clusters are off, as
    it does on macOS and Windows. So that switch is off while the runtime starts, and the node
    IP is checked afterwards: a Ray that ignored both is stopped rather than left listening.
    Its workers run at the caller's priority (``LOCAL_RUNTIME_CONFIG``).
    """
    from ray._private import ray_constants

    saved = getattr(ray_constants, "ENABLE_RAY_CLUSTER", True)
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(
            address="local",
            _node_ip_address="127.0.0.1",
            include_dashboard=False,
            log_to_driver=False,
            _system_config=dict(LOCAL_RUNTIME_CONFIG),
        )
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved
    node_ip = ray.util.get_node_ip_address()
    if not ipaddress.ip_address(node_ip).is_loopback:
        ray.shutdown()
        raise InfrastructureError(
            f"Ray {ray.__version__} started its local runtime on {node_ip}, not on loopback; "
            "start a cluster yourself (ray start --head) and pass its address"
        )


class EpisodeWorker:
    """The body of a Ray actor: one environment, reused for every episode the actor runs."""

    def __init__(
        self, env: Any, env_kwargs: dict[str, Any], agent: Any, agent_factory: Callable | None, options: dict[str, Any]
    ):
        from knowlyrcore.rollout import build_env

        self.env = build_env(env, env_kwargs)
        self.agent, self.agent_factory, self.options = agent, agent_factory, options

    def run(self, task: TaskInfo | None, seed: int | None) -> str:
        from trajectoryhub.rollout import run_episode

        agent = self.agent_factory() if self.agent_factory is not None else self.agent
        return run_episode(self.env, agent, task=task, seed=seed, **self.options).model_dump_json()

    def close(self) -> None:
        self.env.close()


def infrastructure_failure(task: TaskInfo | None, reason: str, options: dict[str, Any]) -> Trajectory:
    """The record of an episode that could not run because its workers kept dying."""
    return Trajectory(
        task=task or TaskInfo(),
        agent=options.get("agent_name", ""),
        model=options.get("model_name", ""),
        outcome=Outcome(success=False, exit_status=INFRASTRUCTURE_FAILURE),
        metadata={INFRASTRUCTURE_FAILURE: reason},
    )


def run_on_ray(
    env: Any,
    *,
    agent: Any,
    agent_factory: Callable | None,
    tasks: Sequence[TaskInfo | None],
    seeds: Sequence[int | None],
    env_kwargs: dict[str, Any],
    options: dict[str, Any],
    concurrency: int,
    address: str | None,
    on_done: Callable[[], None],
) -> list[Trajectory]:
    """Run episode ``i`` = ``(tasks[i], seeds[i])`` for every ``i`` on ``concurrency`` actors;
    return the trajectories in episode order."""
    ray = _import_ray()
    from ray.exceptions import RayActorError, WorkerCrashedError

    started = not ray.is_initialized()
    if started and (address or os.environ.get("RAY_ADDRESS")):
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    elif started:
        start_local_runtime(ray)
    remote_worker = ray.remote(max_restarts=0, max_task_retries=0)(EpisodeWorker)

    def new_actor() -> Any:
        return remote_worker.remote(env, env_kwargs, agent, agent_factory, options)

    n = len(tasks)
    actors = [new_actor() for _ in range(min(concurrency, n))]
    results: list[Trajectory | None] = [None] * n
    pending: dict[Any, tuple[int, int, int]] = {}  # object ref -> (episode, actor slot, attempt)
    queue = iter(range(n))

    def submit(slot: int, episode: int, attempt: int) -> None:
        pending[actors[slot].run.remote(tasks[episode], seeds[episode])] = (episode, slot, attempt)

    try:
        for slot in range(len(actors)):
            submit(slot, next(queue), 0)
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            episode, slot, attempt = pending.pop(ref)
            try:
                results[episode] = Trajectory.model_validate_json(ray.get(ref))
            except (RayActorError, WorkerCrashedError) as exc:
                actors[slot] = new_actor()  # the dead actor's environment went with it
                if attempt == 0:
                    submit(slot, episode, 1)
                    continue
                reason = f"worker died twice: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
                results[episode] = infrastructure_failure(tasks[episode], reason, options)
            on_done()
            following = next(queue, None)
            if following is not None:
                submit(slot, following, 0)
    finally:
        for actor in actors:
            try:
                ray.get(actor.close.remote(), timeout=60)
            except Exception:  # a dead actor has nothing left to close
                pass
            ray.kill(actor)
        if started:
            ray.shutdown()
    return [r for r in results if r is not None]
