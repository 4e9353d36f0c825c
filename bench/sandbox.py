"""Sandbox latency benchmark: median reset and step (`bash echo`) per backend, episodes/s.

Prints one JSON line. For each available backend it builds one SandboxEnv, loads a small
repository task once (container start and setup are not part of an episode), then measures
`reset()` to that task and a `bash echo` step, and episodes/s for short episodes
(reset + 3 steps + submit) run back to back and, with --concurrency N, in N threads.

    python bench/sandbox.py [--episodes 50] [--steps 200] [--concurrency 2]

Targets: Docker reset <= 0.2 s and step <= 20 ms; local step <= 10 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agentsandbox import SandboxEnv, available_backends

ECHO = {"tool": "bash", "params": {"command": "echo hello"}}
EPISODE = [ECHO, {"tool": "read_file", "params": {"path": "app.py"}},
           {"tool": "write_file", "params": {"path": "out.txt", "content": "x"}}, {"tool": "submit", "params": {}}]  # fmt: skip


def make_task(root: Path) -> dict:
    repo = root / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("print('hello')\n" * 20)
    (repo / "README.md").write_text("# bench\n")
    return {
        "description": "bench",
        "repo": str(repo),
        "setup_commands": ["git init -q && git add -A && git commit -qm i"],
    }


def run_episode(env: SandboxEnv, task: dict) -> None:
    env.reset(task=task)
    for action in EPISODE:
        env.step(action)


def bench_backend(backend: str, task: dict, args: argparse.Namespace) -> dict:
    env = SandboxEnv(backend)
    try:
        env.reset(task=task)  # warm: container, repository, setup
        resets = []
        for _ in range(args.episodes):
            start = time.perf_counter()
            env.reset(task=task)
            resets.append(time.perf_counter() - start)
        steps = []
        for _ in range(args.steps):
            start = time.perf_counter()
            env.step(ECHO)
            steps.append(time.perf_counter() - start)
        start = time.perf_counter()
        for _ in range(args.episodes):
            run_episode(env, task)
        sequential = args.episodes / (time.perf_counter() - start)
    finally:
        env.close()

    envs = [SandboxEnv(backend) for _ in range(args.concurrency)]
    try:
        for env in envs:
            env.reset(task=task)
        per_env = max(1, args.episodes // args.concurrency)

        def worker(env: SandboxEnv) -> None:
            for _ in range(per_env):
                run_episode(env, task)

        start = time.perf_counter()
        with ThreadPoolExecutor(args.concurrency) as pool:
            list(pool.map(worker, envs))
        concurrent = per_env * args.concurrency / (time.perf_counter() - start)
    finally:
        for env in envs:
            env.close()
    return {
        "reset_median_s": round(statistics.median(resets), 5),
        "step_median_ms": round(statistics.median(steps) * 1000, 3),
        "step_p95_ms": round(sorted(steps)[int(len(steps) * 0.95)] * 1000, 3),
        "episodes_per_s": round(sequential, 1),
        f"episodes_per_s_x{args.concurrency}": round(concurrent, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    result: dict = {"bench": "sandbox", "targets": {"docker_reset_s": 0.2, "docker_step_ms": 20, "local_step_ms": 10}}
    with tempfile.TemporaryDirectory() as tmp:
        task = make_task(Path(tmp))
        for backend, (ok, why) in available_backends().items():
            result[backend] = bench_backend(backend, task, args) if ok else {"skipped": why}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
