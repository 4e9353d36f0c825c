"""Rule-layer throughput of knowlyr-reward: scored steps per second (target >= 10,000).

Builds realistic coding trajectories (reads, greps, edits, test runs with multi-KB outputs,
some repeats and failures) and times RewardEngine.score_record over them. Prints one JSON line.

    python bench/reward.py [--trajectories 200] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from agentreward import RewardEngine


def make_trajectory(rng: random.Random, n_steps: int) -> dict:
    files = [f"src/pkg/module_{i}.py" for i in range(12)]
    steps = []
    for i in range(n_steps):
        kind = rng.choice(["read", "grep", "edit", "test", "bash"])
        path = rng.choice(files)
        if kind == "read":
            call = ("read_file", {"path": path})
            out = "\n".join(f"def function_{j}(arg_{j}): return arg_{j} * {j}" for j in range(60))
        elif kind == "grep":
            call = ("grep", {"pattern": f"function_{rng.randrange(60)}", "path": "src"})
            out = "\n".join(f"{rng.choice(files)}:{j}: function_{j}()" for j in range(20))
        elif kind == "edit":
            call = ("edit_file", {"path": path, "old_str": f"* {i}", "new_str": f"* {i + 1}"})
            out = f"Edited {path}"
        elif kind == "test":
            call = ("run_tests", {})
            out = f"{rng.randrange(40)} passed, {rng.randrange(5)} failed in 1.2s\n" + "." * 2000
        else:
            call = ("bash", {"command": f"python -c 'print({i})'"})
            out = str(i)
        steps.append({"tool_call": {"name": call[0], "parameters": call[1]},
                      "observation": {"output": out, "exit_code": rng.choice([0, 0, 0, 1])}})  # fmt: skip
    return {"task": {"description": "fix the failing tests in src/pkg", "domain": "coding"}, "steps": steps,
            "outcome": {"success": rng.random() < 0.5}}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=200)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(0)
    data = [make_trajectory(rng, args.steps) for _ in range(args.trajectories)]
    engine = RewardEngine()
    engine.score_record(data[0])  # warm up regex caches
    rates = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for trajectory in data:
            engine.score_record(trajectory)
        rates.append(args.trajectories * args.steps / (time.perf_counter() - start))
    rate = statistics.median(rates)
    print(json.dumps({"bench": "reward_rule_layer", "steps": args.trajectories * args.steps,
                      "steps_per_s": round(rate), "target_steps_per_s": 10000, "meets_target": rate >= 10000}))  # fmt: skip


if __name__ == "__main__":
    main()
