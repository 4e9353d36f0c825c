"""The main job: one turn of the online loop on real parts, start to finish.

1. Three small bug-fix tasks (a repository each, with a test command) run in
   `knowlyr/sandbox` (Docker when a daemon is reachable, else the daemonless local backend).
2. `collect()` rolls out two scripted agents: an expert that reads, fixes and tests, and a
   sloppy one that looks around and submits; every step is scored by the process reward
   model (knowlyr-reward's rule layer) as it happens.
3. The episodes are re-scored as whole trajectories, exported as SFT and DPO datasets, and
   the agents are compared with significance tests.
4. knowlyr-trainer fine-tunes the embedded SmolLM2-135M-Instruct on the SFT data for a few
   steps (bf16 autocast on CPU), then the checkpoint is loaded back as a policy and rolled
   out in the same environment: the loop is closed.

    python examples/online_loop.py [--workdir runs/demo] [--sft-steps 4]
"""

from __future__ import annotations

import argparse
import json
import textwrap
import time
from pathlib import Path

from agentreward import RewardEngine
from knowlyrcore import Trajectory, write_trajectories
from trajectoryhub import DatasetExporter, collect, compare_agents, make_reward_fn

BUGS = {
    # task id: (buggy source, fixed source, description)
    "is-sorted": (
        "def is_sorted(items):\n    return all(items[i] <= items[i + 1] for i in range(len(items)))\n",
        "def is_sorted(items):\n    return all(items[i] <= items[i + 1] for i in range(len(items) - 1))\n",
        "is_sorted crashes with IndexError on every list; make the tests pass.",
    ),
    "mean": (
        "def mean(values):\n    return sum(values) / len(values) + 1\n",
        "def mean(values):\n    return sum(values) / len(values)\n",
        "mean() returns the wrong value; make the tests pass.",
    ),
    "clamp": (
        "def clamp(x, lo, hi):\n    return max(lo, min(x, lo))\n",
        "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n",
        "clamp() ignores its upper bound; make the tests pass.",
    ),
}
TESTS = {
    "is-sorted": "from lib import is_sorted\nassert is_sorted([1, 2, 3])\nassert not is_sorted([3, 1])\n",
    "mean": "from lib import mean\nassert mean([1, 2, 3]) == 2\n",
    "clamp": "from lib import clamp\nassert clamp(5, 0, 3) == 3\nassert clamp(-1, 0, 3) == 0\nassert clamp(2, 0, 3) == 2\n",
}


def make_tasks(root: Path) -> list[dict]:
    tasks = []
    for task_id, (buggy, _, description) in BUGS.items():
        repo = root / "repos" / task_id
        repo.mkdir(parents=True, exist_ok=True)
        (repo / "lib.py").write_text(buggy)
        (repo / "check.py").write_text(TESTS[task_id])
        tasks.append({"id": task_id, "description": description, "domain": "coding", "repo": str(repo),
                      "test_command": "python3 check.py"})  # fmt: skip
    return tasks


class Expert:
    """Reads the code, runs the tests, fixes the bug, re-runs the tests, submits."""

    def reset(self):
        self.turn = 0
        self.task_id = None

    def __call__(self, observation: str) -> dict:
        self.turn += 1
        if self.task_id is None:
            self.task_id = next(t for t, (_, _, d) in BUGS.items() if observation.startswith(d))
        fixed = BUGS[self.task_id][1]
        plan = [
            {"tool": "read_file", "params": {"path": "lib.py"}, "thought": "Read the code under test."},
            {"tool": "run_tests", "params": {}, "thought": "See how it fails."},
            {"tool": "write_file", "params": {"path": "lib.py", "content": fixed}, "thought": "Fix the bug."},
            {"tool": "run_tests", "params": {}, "thought": "Check the fix."},
            {"tool": "submit", "params": {}, "thought": "Tests pass; submit."},
        ]
        return plan[min(self.turn, len(plan)) - 1]


class Sloppy:
    """Lists files twice and submits without fixing anything."""

    def reset(self):
        self.turn = 0

    def __call__(self, observation: str) -> dict:
        self.turn += 1
        if self.turn <= 2:
            return {"tool": "bash", "params": {"command": "ls"}, "thought": "Look around."}
        return {"tool": "submit", "params": {}, "thought": "Probably fine."}


def section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 70 - len(title)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="runs/demo")
    parser.add_argument("--sft-steps", type=int, default=4)
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()
    root = Path(args.workdir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    tasks = make_tasks(root)

    from agentsandbox.backends import resolve_backend

    backend = resolve_backend("auto")  # Docker when a daemon answers, else the local backend
    section(f"1. rollouts in knowlyr/sandbox ({backend} backend)")
    reward_fn = make_reward_fn("coding")
    runs: dict[str, list[Trajectory]] = {}
    for name, agent in (("expert", Expert), ("sloppy", Sloppy)):
        start = time.perf_counter()
        runs[name] = collect("knowlyr/sandbox", agent_factory=agent, tasks=tasks, n_episodes=6, max_steps=8,
                             reward_fn=reward_fn, agent_name=name, env_kwargs={"backend": backend},
                             concurrency=2, progress=False)  # fmt: skip
        took = time.perf_counter() - start
        solved = sum(bool(t.outcome.success) for t in runs[name])
        print(f"{name:7} {len(runs[name])} episodes in {took:.1f}s, solved {solved}/{len(runs[name])}")
    example = runs["expert"][0]
    for step in example.steps:
        print(
            f"  step {step.index}: {step.tool_call.name:10} reward {step.reward:.2f}  {step.observation.output[:60]!r}"
        )

    section("2. process reward, export, comparison")
    engine = RewardEngine(domain="coding")
    scored = [engine.score(t) for ts in runs.values() for t in ts]
    write_trajectories(root / "scored.jsonl", scored)
    for name in runs:
        rewards = [t.reward for t in scored if t.agent == name]
        print(f"{name:7} mean trajectory reward {sum(rewards) / len(rewards):.3f}")
    exporter = DatasetExporter(root / "scored.jsonl")
    sft = exporter.export_sft(root / "sft.jsonl")  # successful trajectories only
    dpo = exporter.export_dpo(root / "dpo.jsonl")
    print(f"SFT records: {sft.written} (skipped {sft.skipped}), DPO pairs: {dpo.written}")
    result = compare_agents({name: [t for t in scored if t.agent == name] for name in runs})
    for c in result["comparisons"]:
        print(f"{c['a']} vs {c['b']}: reward diff {c['diff']:+.3f}, Welch p = {c['welch_p']:.2g}, "
              f"Mann-Whitney p = {c['mannwhitney_p']:.2g}")  # fmt: skip

    section(f"3. SFT of {args.model} on the expert trajectories")
    from agenttrainer import AgentInference, SFTConfig
    from agenttrainer.trainers.sft import SFTTrainer

    config = SFTConfig(model_name_or_path=args.model, train_file=str(root / "sft.jsonl"), output_dir=str(root / "sft"),
                       max_optimizer_steps=args.sft_steps, batch_size=2, learning_rate=5e-5, max_length=1024, bf16=True,
                       agent_format=True, mask_observations=True, step_weighted_loss=True, progress_bar=False)  # fmt: skip
    start = time.perf_counter()
    summary = SFTTrainer(config).train()
    print(f"trained {args.sft_steps} steps in {time.perf_counter() - start:.1f}s -> {summary['output_dir']}")
    print(textwrap.indent(json.dumps({k: v for k, v in summary.items() if k != "output_dir"}, default=str)[:400], "  "))

    section("4. the trained checkpoint acts in the environment")
    inference = AgentInference.from_pretrained(summary["output_dir"], max_new_tokens=48)
    (trained,) = collect("knowlyr/sandbox", agent_factory=lambda: inference.create_agent(), tasks=tasks[:1],
                         max_steps=3, agent_name="sft-smollm2", env_kwargs={"backend": backend}, progress=False)  # fmt: skip
    for step in trained.steps:
        print(f"  step {step.index}: {step.tool_call.name}({json.dumps(step.tool_call.parameters)[:60]})")
    print(f"outcome: {trained.outcome.exit_status}, success={trained.outcome.success}")
    write_trajectories(root / "trained_rollout.jsonl", [trained])
    print(f"\nall artifacts in {root}")


if __name__ == "__main__":
    main()
