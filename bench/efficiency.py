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


def run_worker(workload: str, path: str, args: argparse.Namespace) -> dict[str, Any]:
    """``workload`` on ``path`` in a fresh interpreter; its result with ``peak_rss_gb``."""
    command = [sys.executable, __file__, "--worker", workload, "--path", path, *args.passthrough]
    log(f"{workload} ({path}) ...")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{workload} ({path}) failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    log(f"{workload} ({path}): {result.get('seconds')} s")
    return result


def worker_main(args: argparse.Namespace) -> None:
    if args.worker in ACTING:
        result = acting_worker(args.worker, args.path, args)
    else:
        raise SystemExit(f"unknown workload {args.worker!r}")
    result["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 3)
    print(json.dumps(result))


# -- the comparison ------------------------------------------------------------------------------


def compare(workload: str, old: dict[str, Any], new: dict[str, Any]) -> tuple[float, bool]:
    speedup = old["seconds"] / max(new["seconds"], 1e-9)
    if "actions" in old:
        same = old["actions"] == new["actions"]
    else:
        same = abs(old["loss"] - new["loss"]) <= 1e-5 * max(abs(old["loss"]), 1e-12)
    return round(speedup, 2), same


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(ACTING), help="comma-separated workloads to run")
    parser.add_argument("--retail-tasks", type=int, default=50)
    parser.add_argument("--bfcl-tasks", type=int, default=8)
    parser.add_argument("--policy", default="smollm2-135m", help="the acting checkpoint or alias")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens per model turn (the demo's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--path", choices=("old", "new"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(args)
        return {}
    args.passthrough = [
        f"--retail-tasks={args.retail_tasks}", f"--bfcl-tasks={args.bfcl_tasks}", f"--policy={args.policy}",
        f"--max-new-tokens={args.max_new_tokens}", f"--seed={args.seed}",
    ]  # fmt: skip
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
    for workload in [w.strip() for w in args.only.split(",") if w.strip()]:
        old, new = run_worker(workload, "old", args), run_worker(workload, "new", args)
        line["speedup"][workload], line["identical"][workload] = compare(workload, old, new)
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
