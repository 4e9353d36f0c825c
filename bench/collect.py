"""Rollout collection: episodes/s with the thread executor vs Ray actors, on this machine.

The retail suite's scripted expert plays the same test tasks with the same seeds under both
executors (``collect(..., executor="thread" | "ray")``, ``--concurrency`` workers each). The
environment is an in-process SQLite shop and the expert answers instantly, so an episode costs
about a millisecond: what is measured is each executor's overhead per episode. Ray's start-up
(``ray.init`` of a local runtime) is timed apart from the episodes, and the runs are checked to
produce the same trajectories. Ray pays off when episodes are long (containers, model calls)
and spread over machines; on one small machine with cheap episodes, threads win.

    python bench/collect.py [--episodes 400] [--concurrency 2] [--env-delay-ms 0]

``--env-delay-ms`` adds a sleep to every environment step, standing in for a container or a
model call (threads overlap it too: it is I/O, not CPU). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import ray

from agentsandbox.suites import get_suite
from knowlyrcore import make
from trajectoryhub import collect


class SlowEnv:
    """A factory of the suite's environment whose steps take ``delay`` seconds longer."""

    def __init__(self, env_id: str, delay: float):
        self.env_id, self.delay = env_id, delay

    def __call__(self, **kwargs):
        env = make(self.env_id, **kwargs)
        if self.delay > 0:
            step, delay = env.step, self.delay

            def slow_step(action):
                time.sleep(delay)
                return step(action)

            env.step = slow_step
        return env


def comparable(trajectory) -> str:
    data = trajectory.model_dump(mode="json")
    data.pop("id")
    data["metadata"].pop("started_at", None)
    for step in data["steps"]:
        step.pop("timestamp", None)
        step.pop("duration_s", None)
    return json.dumps(data, sort_keys=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--env-delay-ms", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    suite = get_suite("retail")
    tasks = suite.generate("test", min(args.episodes, 200), args.seed)
    env = SlowEnv(suite.env_id, args.env_delay_ms / 1000)
    options = dict(agent_factory=suite.expert, tasks=tasks, n_episodes=args.episodes, max_steps=suite.max_steps,
                   env_kwargs=suite.env_kwargs, seed=args.seed, concurrency=args.concurrency, progress=False)  # fmt: skip

    start = time.perf_counter()
    threads = collect(env, executor="thread", **options)
    thread_s = time.perf_counter() - start

    start = time.perf_counter()
    ray.init(num_cpus=max(2, args.concurrency), include_dashboard=False, log_to_driver=False)
    ray_init_s = time.perf_counter() - start
    try:
        start = time.perf_counter()
        on_ray = collect(env, executor="ray", **options)
        ray_s = time.perf_counter() - start
    finally:
        ray.shutdown()

    print(json.dumps({
        "bench": "collect",
        "episodes": args.episodes,
        "concurrency": args.concurrency,
        "env_delay_ms": args.env_delay_ms,
        "threads_episodes_per_s": round(args.episodes / thread_s, 1),
        "ray_episodes_per_s": round(args.episodes / ray_s, 1),
        "ray_init_s": round(ray_init_s, 2),
        "ray_over_threads": round(thread_s / ray_s, 3),
        "identical_trajectories": sum(comparable(a) == comparable(b) for a, b in zip(threads, on_ray)),
        "success_rate": round(sum(t.outcome.success for t in on_ray) / len(on_ray), 3),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
