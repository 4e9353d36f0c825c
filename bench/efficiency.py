"""Every token computed once: the old path vs the new, side by side in one run, on this machine.

Each workload runs twice, each time in a fresh process (so peak RSS is that path's own), with
SmolLM2-135M-Instruct in fp32 (bf16 only where the CPU has it natively):

* ``acting_retail``: greedy evaluation of ``--retail-tasks`` retail test tasks, as the demo's
  ``evaluate`` does (``LocalBatchPolicy``, the suite's system prompt, one batch). Old: every turn
  prefills each episode's whole history again (``reuse_cache=False``); new: the acting engine
  keeps each episode's KV cache across turns.
* ``acting_bfcl_multi_turn``: the same on ``--bfcl-tasks`` BFCL multi-turn test tasks (each
  task's API functions in its prompt).
* ``acting_retail_vllm``: the retail workload through a real vLLM server (``--vllm``), when
  vLLM is installed (``scripts/install_vllm.sh``).
* ``sft``, ``dpo``, ``grpo_retail``, ``grpo_bfcl``: one optimizer step, old = ``share_prefix=False``
  (every row runs its whole prompt), new = shared prefixes computed once per group / pair / batch;
  ``rl_iteration``: one online-RL iteration of the demo's shape (4 tasks x 8 samples) end to end,
  old = both old paths, new = both new paths.

Per row: seconds, tokens/s, model GFLOP/s (2 x non-embedding parameters x tokens the matmuls ran
on, pads included, plus the LM head's rows) and that as a fraction of the machine's measured fp32
matmul peak (``matmul_gflops``, best of several 2048^3 matmuls on every core). ``identical``: the
greedy actions of every episode (acting) or the loss (training, within 1e-5 relative) agree
between paths. Timings are wall clock: run on a quiet machine.

    python bench/efficiency.py [--only acting_retail,acting_bfcl_multi_turn] [--retail-tasks 50] \\
        [--bfcl-tasks 8] [--policy smollm2-135m] [--vllm]

Prints one JSON line (progress goes to stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ACTING = ("acting_retail", "acting_bfcl_multi_turn")
TRAINING = ("sft", "dpo", "grpo_retail", "grpo_bfcl", "rl_iteration")
MAX_PROMPT_CHARS = 3500  # ~900 tokens: a group's prompt and completions fit max_length
SUITES = {"acting_retail": "retail", "acting_bfcl_multi_turn": "bfcl-multi-turn"}


def log(message: str) -> None:
    print(f"[efficiency {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the machine ------------------------------------------------------------------------------


def matmul_gflops(dtype_name: str = "float32", size: int = 2048, repeats: int = 8) -> float:
    """Best-of-``repeats`` GFLOP/s of one ``size``^3 matmul on every core."""
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    dtype = getattr(torch, dtype_name)
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def model_flops_per_token(model: Any) -> tuple[float, float]:
    """(FLOPs per token through the decoder, FLOPs per row through the LM head)."""
    config = model.config
    embedding = config.vocab_size * config.hidden_size
    parameters = sum(p.numel() for p in model.parameters())
    return 2.0 * (parameters - embedding), 2.0 * embedding


# -- workers: one measurement each, in its own process ---------------------------------------------


class CountingPolicy:
    """A ``BatchPolicy`` that adds up the prompt and answer tokens of every action."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)

    def reset_batch(self, tasks):
        self.policy.reset_batch(tasks)

    def act_batch(self, observations):
        actions = self.policy.act_batch(observations)
        for action in actions:
            if action is not None:
                self.prompt_tokens += action["usage"]["prompt_tokens"]
                self.completion_tokens += action["usage"]["completion_tokens"]
        return actions


def acting_worker(workload: str, path: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from agentsandbox.suites import get_suite
    from agenttrainer.batch_policy import LocalBatchPolicy
    from trajectoryhub.evaluate import evaluate_policy

    torch.set_num_threads(os.cpu_count() or 1)
    suite = get_suite(SUITES[workload])
    n = args.retail_tasks if workload == "acting_retail" else args.bfcl_tasks
    tasks = suite.generate("test", n, args.seed)
    policy = LocalBatchPolicy.from_pretrained(
        args.policy,
        system_prompt=suite.system_prompt,
        max_new_tokens=args.max_new_tokens,
        torch_dtype=torch.float32,
        reuse_cache=path == "new",
    )
    counting = CountingPolicy(policy)
    start = time.perf_counter()
    summary, runs = evaluate_policy(
        counting, tasks, env=suite.env_id, name=path, split="test", max_steps=suite.max_steps,
        env_kwargs=suite.env_kwargs, batch_size=len(tasks), model_name=args.policy, progress=False,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    stats = policy.generator.stats
    per_token, per_logit = model_flops_per_token(policy.engine.model)
    flops = per_token * stats["computed_tokens"] + per_logit * stats["logit_rows"]
    tokens = counting.prompt_tokens + counting.completion_tokens
    return {
        "seconds": round(seconds, 1),
        "episodes": len(runs),
        "steps": sum(len(r.steps) for r in runs),
        "success_rate": summary["success_rate"],
        "prompt_tokens": counting.prompt_tokens,
        "generated_tokens": counting.completion_tokens,
        "tokens_per_s": round(tokens / seconds, 1),
        "computed_tokens": stats["computed_tokens"],
        "model_gflops": round(flops / seconds / 1e9, 2),
        "actions": [[(s.tool_call.name, s.tool_call.parameters) for s in r.steps] for r in runs],
        "engine": {k: v for k, v in stats.items() if k not in ("computed_tokens",)},
    }


# -- training workloads -------------------------------------------------------------------------


def prepare(workdir: Path, args: argparse.Namespace) -> None:
    """Once per workdir: the demo's retail SFT records and DPO pairs (expert vs corrupted expert on
    160 train tasks), GRPO groups of G = 8 from them (retail: the suite's system turn; BFCL: each
    task's tool schemas in the system turn), online-RL tasks, and the acting checkpoint."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    from demo import expert_data

    from agentsandbox.suites import get_suite
    from knowlyrcore import write_jsonl

    retail = get_suite("retail")
    if not (workdir / "sft.jsonl").exists():
        log("preparing retail SFT records and DPO pairs (the demo's expert data)")
        expert_data(retail, retail.generate("train", 160, args.seed), workdir)
    if not (workdir / "grpo_retail.jsonl").exists():
        write_jsonl(workdir / "grpo_retail.jsonl", groups_from_sft(read_records(workdir / "sft.jsonl"), args.seed))
    if not (workdir / "grpo_bfcl.jsonl").exists():
        log("preparing BFCL groups (tool schemas in the prompt)")
        write_jsonl(workdir / "grpo_bfcl.jsonl", groups_from_sft(bfcl_sft_records(workdir, args.seed), args.seed))
    write_jsonl(workdir / "rl_tasks.jsonl", retail.generate("train", 4, args.seed + 1))


def sft_policy(workdir: Path, args: argparse.Namespace) -> str:
    """The acting checkpoint: SmolLM2-135M after ``--sft-steps`` steps of the demo's SFT recipe on
    its expert data (multi-turn episodes, as the demo's evaluations of SFT and RL play), trained
    once per workdir."""
    from agenttrainer.config import SFTConfig
    from agenttrainer.trainers.sft import SFTTrainer

    final = workdir / "sft-policy" / "final"
    if not (final / "config.json").exists():
        log(f"training the acting policy: {args.sft_steps} SFT steps of the demo's recipe")
        config = SFTConfig(
            model_name_or_path="smollm2-135m", train_file=str(workdir / "sft.jsonl"), output_dir=str(final.parent),
            max_optimizer_steps=args.sft_steps, batch_size=2, gradient_accumulation_steps=4, learning_rate=2e-4,
            warmup_ratio=0.05, max_length=1024, bf16=False, save_steps=0, seed=args.seed, progress_bar=False,
        )  # fmt: skip
        SFTTrainer(config).train()
    return str(final)


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def bfcl_sft_records(workdir: Path, seed: int, n: int = 48) -> list[dict[str, Any]]:
    """The BFCL suite expert's episodes on ``n`` train tasks as chat records with their tools."""
    from agentsandbox.suites import get_suite
    from trajectoryhub import DatasetExporter, collect_batched

    suite = get_suite("bfcl")
    tasks = suite.generate("train", n, seed)
    runs = collect_batched(suite.env_id, suite.expert, tasks, max_steps=suite.max_steps, agent_name="expert",
                           env_kwargs=suite.env_kwargs, progress=False)  # fmt: skip
    DatasetExporter(trajectories=runs).export_sft(
        workdir / "bfcl_sft.jsonl", format="messages", system_prompt=suite.system_prompt, include_tools=True
    )
    return read_records(workdir / "bfcl_sft.jsonl")


def groups_from_sft(records: list[dict[str, Any]], seed: int, group: int = 8, n: int = 16) -> list[dict[str, Any]]:
    """GRPO groups: each record's prompt (system turn with its tools as text, the first user turn)
    with G completions, the expert's (reward 1) and G - 1 with its answers' characters shuffled
    in part (reward 0), so each group has G distinct rows of the expert's lengths."""
    import random

    rng = random.Random(seed)
    out = []
    for index, record in enumerate(records):
        if len(out) == n:
            break
        messages = record["messages"]
        first_answer = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
        prompt = [dict(m) for m in messages[:first_answer]]
        if record.get("tools"):
            tools = json.dumps(record["tools"], ensure_ascii=False)
            prompt[0] = {**prompt[0], "content": f"{prompt[0]['content']}\n\nTools:\n{tools}"}
        if len(json.dumps(prompt)) > MAX_PROMPT_CHARS:
            continue  # a long API's schemas: it would not fit max_length with its completions
        completion = messages[first_answer:]
        trajectories = [{"messages": completion, "reward": 1.0}]
        for _ in range(group - 1):
            changed = []
            for m in completion:
                text = m.get("content") or ""
                if m["role"] == "assistant" and len(text) > 4:
                    cut = rng.randrange(len(text) // 2, len(text))
                    tail = list(text[cut:])
                    rng.shuffle(tail)
                    m = {**m, "content": text[:cut] + "".join(tail)}
                changed.append(m)
            trajectories.append({"messages": changed, "reward": 0.0})
        out.append({"task_id": record.get("task_id") or f"g{index}", "prompt": prompt, "trajectories": trajectories})
    return out


class StepClock:
    """Seconds of each optimizer step (the time the training loop spends between the loop's
    ``steps`` yields) and the first step's loss, read off ``agenttrainer.trainers.loop.RunStart``."""

    def __init__(self) -> None:
        from agenttrainer.trainers import loop

        self.seconds: list[float] = []
        self.losses: list[float] = []
        self.grad_norms: list[float] = []
        steps, optimizer_step = loop.RunStart.steps, loop.RunStart.optimizer_step
        clock = self

        def timed_steps(run, plan):
            for item in steps(run, plan):
                start = time.perf_counter()
                yield item
                clock.seconds.append(time.perf_counter() - start)

        def recorded_step(run, step_loss):
            loss, grad_norm = optimizer_step(run, step_loss)
            clock.losses.append(loss)
            clock.grad_norms.append(float("nan") if grad_norm is None else float(grad_norm))
            return loss, grad_norm

        loop.RunStart.steps, loop.RunStart.optimizer_step = timed_steps, recorded_step


def rl_iteration_worker(path: str, args: argparse.Namespace) -> dict[str, Any]:
    """One online-RL iteration of the demo's shape: 4 tasks x 8 samples, GRPO with partial credit."""
    import tempfile

    import torch

    from agentsandbox.suites import get_suite
    from agenttrainer.config import OnlineRLConfig
    from agenttrainer.online import OnlineRLTrainer

    torch.set_num_threads(os.cpu_count() or 1)
    suite = get_suite("retail")
    workdir = Path(args.workdir)
    out = Path(tempfile.mkdtemp(prefix="efficiency-rl-"))
    new = path == "new"
    config = OnlineRLConfig(
        model_name_or_path=args.policy, env_id=suite.env_id, env_kwargs={**(suite.env_kwargs or {}), "reward": "partial"},
        tasks_file=str(workdir / "rl_tasks.jsonl"), output_dir=str(out / "rl"), system_prompt=suite.system_prompt,
        include_tools=False, group_size=8, tasks_per_iteration=4, num_iterations=1, max_steps=suite.max_steps,
        max_new_tokens=args.max_new_tokens, max_episode_tokens=2048, learning_rate=1e-5, warmup_ratio=0.0,
        lr_scheduler="constant", kl_coef=0.0, loss_normalization="token", temperature=1.0, batch_size=2,
        skip_uniform_groups=False, bf16=False, seed=args.seed, progress_bar=False,
        share_prefix=new, reuse_cache=new,
    )  # fmt: skip
    trainer = OnlineRLTrainer(config)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    metrics = read_records(out / "rl" / "metrics.jsonl")[0]
    return {
        "seconds": round(seconds, 1),
        "rollout_seconds": round(metrics["rollout/seconds"], 1),
        "train_seconds": round(metrics.get("train/seconds", 0.0), 1),
        "episodes": int(metrics["rollout/episodes"]),
        "sampled_tokens": int(metrics["rollout/sampled_tokens"]),
    }


def training_worker(workload: str, path: str, args: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    import torch

    from agenttrainer.config import DPOConfig, GRPOConfig, SFTConfig
    from agenttrainer.trainers.dpo import DPOTrainer
    from agenttrainer.trainers.grpo import GRPOTrainer
    from agenttrainer.trainers.sft import SFTTrainer

    torch.set_num_threads(os.cpu_count() or 1)
    workdir = Path(args.workdir)
    clock = StepClock()
    share = path == "new"
    out = tempfile.mkdtemp(prefix=f"efficiency-{workload}-")
    common = dict(
        model_name_or_path="smollm2-135m", output_dir=out, bf16=False, save_steps=0, seed=args.seed,
        max_optimizer_steps=args.train_steps, warmup_ratio=0.0, learning_rate=1e-5, share_prefix=share,
    )  # fmt: skip
    if workload == "sft":
        config = SFTConfig(train_file=str(workdir / "sft.jsonl"), batch_size=args.micro_batch,
                           gradient_accumulation_steps=1, max_length=1024, **common)  # fmt: skip
        trainer: Any = SFTTrainer(config)
    elif workload == "dpo":
        config = DPOConfig(train_file=str(workdir / "dpo.jsonl"), batch_size=args.micro_batch,
                           gradient_accumulation_steps=1, max_length=1024, **common)  # fmt: skip
        trainer = DPOTrainer(config)
    else:
        suite_file = workdir / f"{workload}.jsonl"
        # one group (G = 8) per forward, two per step, with gradient checkpointing: unshared, one
        # group's activations (8 x 1,536 tokens, 30 layers) and logits (2.4 GB) were OOM-killed at
        # 24 GB; shared, the prompt is computed once and the same group needs a fraction of that
        config = GRPOConfig(train_file=str(suite_file), batch_size=1, group_size=8,
                            gradient_accumulation_steps=2, max_length=1536, gradient_checkpointing=True,
                            **common)  # fmt: skip
        trainer = GRPOTrainer(config)
    trainer.train()
    seconds = sum(clock.seconds[1:]) / max(len(clock.seconds) - 1, 1)  # the first step warms up
    return {"seconds": round(seconds, 2), "steps": len(clock.seconds), "loss": clock.losses[0],
            "grad_norm": clock.grad_norms[0], "losses": [round(x, 6) for x in clock.losses]}  # fmt: skip


def token_acting(policy: Any, tasks: list[dict[str, Any]], suite: Any) -> dict[str, Any]:
    """Greedy evaluation through a ``TokenPolicy`` (token ids in and out, as online RL acts)."""
    from trajectoryhub.evaluate import evaluate_policy

    start = time.perf_counter()
    summary, runs = evaluate_policy(
        policy, tasks, env=suite.env_id, name="x", split="test", max_steps=suite.max_steps,
        env_kwargs=suite.env_kwargs, batch_size=len(tasks), model_name="x", progress=False,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    generated = sum(len(s.token_ids or []) for r in runs for s in r.steps)
    return {
        "seconds": round(seconds, 1),
        "steps": sum(len(r.steps) for r in runs),
        "success_rate": summary["success_rate"],
        "generated_tokens": generated,
        "generated_tokens_per_s": round(generated / seconds, 1),
    }


def vllm_worker(args: argparse.Namespace) -> dict[str, Any]:
    """The retail acting workload token-in/token-out, through our engine and through a real vLLM
    server (fp32, prefix caching) on the same tasks, one after the other."""
    import torch

    from agentsandbox.suites import get_suite
    from agenttrainer.generation import LocalGenerator, ServerGenerator
    from agenttrainer.models import load_model_and_tokenizer
    from agenttrainer.online.token_policy import TokenPolicy
    from agenttrainer.serving.vllm import running_vllm

    torch.set_num_threads(os.cpu_count() or 1)
    suite = get_suite("retail")
    tasks = suite.generate("test", args.retail_tasks, args.seed)
    model, tokenizer = load_model_and_tokenizer(args.policy)
    settings = dict(system_prompt=suite.system_prompt, max_new_tokens=args.max_new_tokens, temperature=0.0)
    ours = token_acting(TokenPolicy(LocalGenerator(model.eval(), tokenizer), tokenizer, **settings), tasks, suite)
    del model
    started = time.perf_counter()
    with running_vllm(args.policy, dtype="float32") as url:
        start_seconds = time.perf_counter() - started
        served = Path(args.policy).name if Path(args.policy).is_dir() else args.policy
        generator = ServerGenerator(url, served, push_weights="none")
        vllm = token_acting(TokenPolicy(generator, tokenizer, **settings), tasks, suite)
    vllm["start_seconds"] = round(start_seconds, 1)
    return {"seconds": vllm["seconds"], "ours": ours, "vllm": vllm,
            "ours_vs_vllm_throughput": round(ours["generated_tokens_per_s"] / vllm["generated_tokens_per_s"], 3)}  # fmt: skip


def run_worker(workload: str, path: str, args: argparse.Namespace) -> dict[str, Any]:
    """``workload`` on ``path`` in a fresh interpreter; its result with ``peak_rss_gb``."""
    command = [sys.executable, __file__, "--worker", workload, "--path", path, *args.passthrough]
    log(f"{workload} ({path}) ...")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{workload} ({path}) failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    shown = {k: v for k, v in result.items() if k != "actions"}
    log(f"{workload} ({path}): {json.dumps(shown)}")  # each row as it comes: a cut-short run keeps them
    return result


def worker_main(args: argparse.Namespace) -> None:
    if args.worker in ACTING:
        result = acting_worker(args.worker, args.path, args)
    elif args.worker in ("sft", "dpo", "grpo_retail", "grpo_bfcl"):
        result = training_worker(args.worker, args.path, args)
    elif args.worker == "acting_retail_vllm":
        result = vllm_worker(args)
    elif args.worker == "rl_iteration":
        result = rl_iteration_worker(args.path, args)
    else:
        raise SystemExit(f"unknown workload {args.worker!r}")
    result["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 3)
    print(json.dumps(result))


# -- the comparison ------------------------------------------------------------------------------


def compare(workload: str, old: dict[str, Any], new: dict[str, Any]) -> tuple[float, bool | None]:
    speedup = old["seconds"] / max(new["seconds"], 1e-9)
    if "actions" in old:
        same = old["actions"] == new["actions"]
    elif "loss" not in old:  # sampled at temperature 1: nothing to compare
        same = None
    else:  # the first step (same weights, same batch): its loss and its gradient's norm
        same = all(_close(old[key], new[key]) for key in ("loss", "grad_norm"))
    return round(speedup, 2), same


def _close(a: float, b: float, rel: float = 1e-5) -> bool:
    """Equal within ``rel`` of their size; a GRPO loss is ~1e-8 on its first step (advantages sum
    to zero per group), so it is compared in absolute terms below 1e-6 and the norm carries it."""
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-6)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(ACTING + TRAINING), help="comma-separated workloads to run")
    parser.add_argument("--retail-tasks", type=int, default=50)
    parser.add_argument("--bfcl-tasks", type=int, default=8)
    parser.add_argument("--policy", default="sft",
                        help="the acting checkpoint or alias; 'sft': SmolLM2-135M after --sft-steps of the demo's SFT")  # fmt: skip
    parser.add_argument("--sft-steps", type=int, default=12, help="SFT steps of the 'sft' acting policy")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens per model turn (the demo's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default="runs/bench-efficiency", help="prepared data and checkpoints")
    parser.add_argument(
        "--train-steps", type=int, default=3, help="optimizer steps per training row (the first is a warm-up)"
    )
    parser.add_argument("--micro-batch", type=int, default=4, help="SFT examples / DPO pairs per step")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--path", choices=("old", "new"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(args)
        return {}
    args.passthrough = [
        f"--retail-tasks={args.retail_tasks}", f"--bfcl-tasks={args.bfcl_tasks}", f"--policy={args.policy}",
        f"--max-new-tokens={args.max_new_tokens}", f"--seed={args.seed}", f"--workdir={args.workdir}",
        f"--train-steps={args.train_steps}", f"--micro-batch={args.micro_batch}",
    ]  # fmt: skip
    workloads = [w.strip() for w in args.only.split(",") if w.strip()]
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    prepare(Path(args.workdir), args)
    if args.policy == "sft":
        args.policy = sft_policy(Path(args.workdir), args)
        args.passthrough = [a if not a.startswith("--policy=") else f"--policy={args.policy}" for a in args.passthrough]
    import torch

    from agenttrainer.precision import native_bf16

    peak = matmul_gflops("float32")
    line: dict[str, Any] = {
        "bench": "efficiency",
        "machine": {"cores": os.cpu_count(), "torch": torch.__version__, "native_bf16": native_bf16()},
        "matmul_gflops": round(peak, 1),
        "matmul_gflops_bf16": round(matmul_gflops("bfloat16"), 1) if native_bf16() else None,
        "policy": args.policy,
        "speedup": {},
        "identical": {},
        "peak_fraction": {},
        "rows": {},
    }
    for workload in workloads:
        try:
            if workload == "acting_retail_vllm":
                line["rows"][workload] = run_worker(workload, "new", args)
                continue
            old, new = run_worker(workload, "old", args), run_worker(workload, "new", args)
        except RuntimeError as exc:  # one workload failed: say so in the line, measure the others
            log(str(exc))
            line["rows"][workload] = {"error": str(exc).splitlines()[-1][:300]}
            continue
        line["speedup"][workload], line["identical"][workload] = compare(workload, old, new)
        if "model_gflops" in old:
            line["peak_fraction"][workload] = {
                path: round(row["model_gflops"] / peak, 3) for path, row in (("old", old), ("new", new))
            }
        for row in (old, new):
            row.pop("actions", None)
        line["rows"][workload] = {"old": old, "new": new}
    print(json.dumps(line))
    return line


if __name__ == "__main__":
    main()
