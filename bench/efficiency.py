"""Every token computed once: the old path vs the new, side by side in one run, on this machine.

Each workload runs twice, each time in a fresh process (so peak RSS is that path's own), with
SmolLM2-135M-Instruct in fp32 (bf16 only where the CPU has it natively):

* ``acting_retail``: greedy evaluation of ``--retail-tasks`` retail test tasks, as the demo's
  ``evaluate`` does (the local policy, ``TokenPolicy``, the suite's system prompt, one batch). Old:
  every turn prefills each episode's whole history again (``reuse_cache=False``); new: the acting
  engine keeps each episode's KV cache across turns.
* ``acting_bfcl_multi_turn``: the same on ``--bfcl-tasks`` BFCL multi-turn test tasks (each
  task's API functions in its prompt).
* ``acting_retail_vllm``: the retail workload through a real vLLM server (``--vllm``), when
  vLLM is installed (``scripts/install_vllm.sh``).
* ``sft``, ``dpo``, ``grpo_retail``, ``grpo_bfcl``: seconds per optimizer step, old =
  ``share_prefix=False`` (every row runs its whole prompt), new = shared prefixes computed once per
  group / pair / batch. ``--train-steps`` steps, each timed from the end of the previous one (the
  first from the start of its first micro-batch), so all micro-batches of gradient accumulation are
  in their step (``StepClock``); the first warms up and is left out of the mean when there are two
  or more. A worker that timed no step fails instead of reporting 0 seconds.
* ``rl_iteration``: one online-RL iteration of the demo's shape (4 tasks x 8 samples) end to end,
  old = both old paths, new = both new paths. Training micro-batches: old 2 episodes, new 8 (one
  group of G = 8 per forward, so ``share_prefix`` computes the group's prompt once; with 2 it
  would only share it between pairs).

Per row: seconds, tokens/s, model GFLOP/s (2 x non-embedding parameters x tokens the matmuls ran
on, pads included, plus the LM head's rows) and that as a fraction of the machine's measured fp32
matmul peak (``matmul_gflops``, best of several 2048^3 matmuls on every core). ``identical``: the
greedy actions of every episode (acting) or the first step's loss and gradient norm (training,
within 1e-5 relative; the loss absolute below 1e-6, as a GRPO group's first loss is ~0) agree
between paths. Timings are wall clock: run on a quiet machine. A failed worker's row is
``{"error": ...}`` with its return code (a signal: killed, out of memory?) and the last line of
its stderr that is not a progress bar.

    python bench/efficiency.py [--only acting_retail,acting_bfcl_multi_turn] [--retail-tasks 50] \\
        [--bfcl-tasks 8] [--policy smollm2-135m] [--vllm]

Prints one JSON line (progress goes to stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ACTING = ("acting_retail", "acting_bfcl_multi_turn")
TRAINING = ("sft", "dpo", "grpo_retail", "grpo_bfcl", "rl_iteration")
MAX_PROMPT_CHARS = 3500  # ~900 tokens: a group's prompt and completions fit max_length
SUITES = {"acting_retail": "retail", "acting_bfcl_multi_turn": "bfcl-multi-turn"}
TINY_GRAD_NORM = 1e-4  # a GRPO first-step gradient norm below this is reported in its row


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


def token_counts(runs: list[Any]) -> tuple[int, int]:
    """(prompt tokens, answer tokens) over every answer of ``runs``, from the ids the local policy
    recorded: an answer's prompt is the first prompt and every answer and observation before it."""
    prompt_tokens = completion_tokens = 0
    for run in runs:
        length = len(run.metadata["prompt_token_ids"])
        for step in run.steps:
            prompt_tokens += length
            completion_tokens += len(step.token_ids)
            length += len(step.token_ids) + len(step.metadata["observation_token_ids"])
    return prompt_tokens, completion_tokens


def acting_worker(workload: str, path: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from agentsandbox.suites import get_suite
    from agenttrainer.acting import TokenPolicy
    from trajectoryhub.evaluate import evaluate_policy

    torch.set_num_threads(os.cpu_count() or 1)
    suite = get_suite(SUITES[workload])
    n = args.retail_tasks if workload == "acting_retail" else args.bfcl_tasks
    tasks = suite.generate("test", n, args.seed)
    policy = TokenPolicy.from_pretrained(
        args.policy,
        system_prompt=suite.system_prompt,
        max_new_tokens=args.max_new_tokens,
        temperature=0.0,
        torch_dtype=torch.float32,
        reuse_cache=path == "new",
    )
    start = time.perf_counter()
    summary, runs = evaluate_policy(
        policy, tasks, env=suite.env_id, name=path, split="test", max_steps=suite.max_steps,
        env_kwargs=suite.env_kwargs, batch_size=len(tasks), model_name=args.policy, progress=False,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    stats = policy.generator.stats
    per_token, per_logit = model_flops_per_token(policy.generator.model)
    flops = per_token * stats["computed_tokens"] + per_logit * stats["logit_rows"]
    prompt_tokens, completion_tokens = token_counts(runs)
    tokens = prompt_tokens + completion_tokens
    return {
        "seconds": round(seconds, 1),
        "episodes": len(runs),
        "steps": sum(len(r.steps) for r in runs),
        "success_rate": summary["success_rate"],
        "prompt_tokens": prompt_tokens,
        "generated_tokens": completion_tokens,
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
    for name in ("grpo_retail", "grpo_bfcl"):
        if (workdir / f"{name}.jsonl").exists() and not distinct_groups(workdir / f"{name}.jsonl"):
            log(f"{name}.jsonl has groups of identical trajectories: writing it again")
            (workdir / f"{name}.jsonl").unlink()
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
    with G completions, the expert's (reward 1) and G - 1 with each of its answers garbled in part
    (reward 0): the text, or for a tool call with no text (every retail and BFCL expert answer)
    its arguments. So each group has G distinct rows of the expert's lengths that part after a
    common start, as sampled ones do; identical rows would let ``share_prefix`` compute a group's
    completions once, and their advantages would cancel to a zero gradient."""
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
        trajectories, seen = [{"messages": completion, "reward": 1.0}], {json.dumps(completion)}
        for _ in range(group - 1):
            for _attempt in range(100):  # a short call's shuffle can repeat another row: draw again
                changed = [_garbled(m, rng) for m in completion]
                if json.dumps(changed) not in seen:
                    break
            seen.add(json.dumps(changed))
            trajectories.append({"messages": changed, "reward": 0.0})
        out.append({"task_id": record.get("task_id") or f"g{index}", "prompt": prompt, "trajectories": trajectories})
    return out


def _garbled(message: dict[str, Any], rng: Any) -> dict[str, Any]:
    """An assistant ``message`` with the second part of its text (a random cut past the middle)
    shuffled, or without text, of each tool call's arguments; any other message as it is."""

    def garble(text: str) -> str:
        cut = rng.randrange(len(text) // 2, len(text))
        tail = list(text[cut:])
        rng.shuffle(tail)
        return text[:cut] + "".join(tail)

    if message["role"] != "assistant":
        return message
    text = message.get("content") or ""
    if len(text) > 4:
        return {**message, "content": garble(text)}
    calls = [
        {**call, "function": {**call["function"], "arguments": garble(call["function"]["arguments"])}}
        if len(call.get("function", {}).get("arguments") or "") > 4
        else call
        for call in message.get("tool_calls") or []
    ]
    return {**message, "tool_calls": calls} if calls else message


def distinct_groups(path: Path) -> bool:
    """Whether every group in ``path`` has distinct trajectories (files an earlier version of
    ``groups_from_sft`` wrote have G copies of the expert's tool calls: they are written again)."""
    for record in read_records(path):
        rows = [json.dumps(t["messages"], sort_keys=True) for t in record["trajectories"]]
        if len(set(rows)) < len(rows):
            return False
    return True


class StepClock:
    """Wall seconds of each optimizer step with its loss and gradient norm, read off
    ``agenttrainer.trainers.loop.RunStart`` (use as a context manager: it puts the originals back).

    A step ends when ``optimizer_step`` returns and starts where the previous one ended, so all of
    its micro-batches (gradient accumulation) and the loop's bookkeeping are inside it. The first
    step starts at the first window ``steps`` yields (SFT, DPO) or, for a recipe that walks its own
    plan without ``steps`` (GRPO: a window of micro-batches may take several optimizer steps), when
    the run was started (``RunStart.started``, the end of ``start_run``, just before its first
    micro-batch)."""

    MARK = "_step_clock_mark"  # on the run: when its next optimizer step started

    def __init__(self) -> None:
        from agenttrainer.trainers import loop

        self.seconds: list[float] = []
        self.losses: list[float] = []
        self.grad_norms: list[float] = []
        self._loop = loop
        self._originals = steps, optimizer_step = loop.RunStart.steps, loop.RunStart.optimizer_step
        clock = self

        def timed_steps(run, plan):
            for item in steps(run, plan):
                vars(run).setdefault(clock.MARK, time.perf_counter())  # the first window starts
                yield item

        def recorded_step(run, step_loss):
            loss, grad_norm = optimizer_step(run, step_loss)
            now = time.perf_counter()
            clock.seconds.append(now - vars(run).get(clock.MARK, run.started))
            vars(run)[clock.MARK] = now
            clock.losses.append(float(loss))
            clock.grad_norms.append(float("nan") if grad_norm is None else float(grad_norm))
            return loss, grad_norm

        loop.RunStart.steps, loop.RunStart.optimizer_step = timed_steps, recorded_step

    def __enter__(self) -> StepClock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Put ``RunStart.steps`` and ``RunStart.optimizer_step`` back."""
        self._loop.RunStart.steps, self._loop.RunStart.optimizer_step = self._originals

    def result(self) -> dict[str, Any]:
        """The mean seconds per optimizer step (the first warms up and is left out when there are
        two or more), the steps, and the first step's loss and gradient norm; raises when no
        optimizer step was recorded (a run that measured nothing must not report 0 seconds)."""
        if not self.seconds:
            raise RuntimeError(
                "no optimizer step was recorded: the recipe did not call RunStart.optimizer_step "
                "(no data, or max_optimizer_steps reached by a resumed run?)"
            )
        timed = self.seconds[1:] or self.seconds
        return {
            "seconds": round(sum(timed) / len(timed), 3),
            "steps": len(self.seconds),
            "warmup_excluded": len(self.seconds) > 1,
            "step_seconds": [round(x, 3) for x in self.seconds],
            "loss": self.losses[0],
            "grad_norm": self.grad_norms[0],
            "losses": [float(f"{x:.6g}") for x in self.losses],  # 6 digits: a GRPO loss is ~1e-8
            "grad_norms": [float(f"{x:.6g}") for x in self.grad_norms],
        }


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
    # Episodes per training micro-batch: the new path takes one group (G = 8 episodes of a task,
    # consecutive) per micro-batch, so share_prefix computes the group's prompt once per forward;
    # the old path keeps 2 (an unshared micro-batch of 8 full episodes holds 4x the activations).
    batch_size = 8 if new else 2
    config = OnlineRLConfig.from_dict(dict(
        model_name_or_path=args.policy, env_id=suite.env_id, env_kwargs={**(suite.env_kwargs or {}), "reward": "partial"},
        tasks_file=str(workdir / "rl_tasks.jsonl"), output_dir=str(out / "rl"), system_prompt=suite.system_prompt,
        include_tools=False, group_size=8, tasks_per_iteration=4, num_iterations=1, max_steps=suite.max_steps,
        max_new_tokens=args.max_new_tokens, max_episode_tokens=2048, learning_rate=1e-5, warmup_ratio=0.0,
        lr_scheduler="constant", kl_coef=0.0, loss_normalization="token", temperature=1.0, batch_size=batch_size,
        skip_uniform_groups=False, bf16=False, seed=args.seed, progress_bar=False,
        share_prefix=new, reuse_cache=new,
    ))  # fmt: skip
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
        "train_tokens": int(metrics.get("train/tokens", 0)),
        "batch_size": batch_size,
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
        if not distinct_groups(suite_file):  # identical rows: shared once, and a zero gradient
            raise RuntimeError(f"{suite_file} has groups of identical trajectories: run the bench to write it again")
        # one group (G = 8) per forward, two per step, with gradient checkpointing: unshared, one
        # group's activations (8 x 1,536 tokens, 30 layers) and logits (2.4 GB) were OOM-killed at
        # 24 GB; shared, the prompt is computed once and the same group needs a fraction of that
        config = GRPOConfig(train_file=str(suite_file), batch_size=1, group_size=8,
                            gradient_accumulation_steps=2, max_length=1536, gradient_checkpointing=True,
                            **common)  # fmt: skip
        trainer = GRPOTrainer(config)
    with StepClock() as clock:
        trainer.train()
    result = clock.result()
    if workload.startswith("grpo") and abs(result["grad_norm"]) < TINY_GRAD_NORM:
        # compare() checks it relative to its own size (no absolute floor): say how small it is
        result["note"] = f"first-step grad norm {result['grad_norm']:.3g} < {TINY_GRAD_NORM:g}"
        log(f"{workload} ({path}): {result['note']}")
    return result


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
    from agenttrainer.acting import LocalGenerator, ServerGenerator, TokenPolicy
    from agenttrainer.models import load_model_and_tokenizer
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


class WorkerFailed(RuntimeError):
    """A worker process that failed: its return code said in words (``cause``) and the last lines
    of its stderr that are not progress bars (``tail``)."""

    def __init__(self, workload: str, path: str, cause: str, tail: list[str]) -> None:
        self.cause, self.tail = f"{workload} ({path}) {cause}", tail
        super().__init__("\n".join([f"{self.cause}; its stderr ends:", *tail] if tail else [self.cause]))

    @property
    def summary(self) -> str:
        """One line for the row's ``error``: the cause and the last stderr line (the exception)."""
        return f"{self.cause}: {self.tail[-1]}" if self.tail else self.cause


# a tqdm bar: "grpo:  50%|#####     | 1/2 [00:10<00:10, 10.0s/it, loss=0.1]", "3it [00:01, 2.9it/s]"
PROGRESS = re.compile(r"\d+%\||\|\s*\d+/\d+\s*\[|\[\d+:\d+[<,\]]|\d(it/s|s/it)\b")


def stderr_tail(stderr: str, lines: int = 20) -> list[str]:
    """The last ``lines`` non-empty lines of ``stderr`` that are not progress bars (tqdm redraws
    its bar after a carriage return; ``splitlines`` splits there too, so each redraw is a line)."""
    return [line.rstrip() for line in stderr.splitlines() if line.strip() and not PROGRESS.search(line)][-lines:]


def exit_cause(returncode: int) -> str:
    """``returncode`` in words: a negative one is the signal that killed the process."""
    if returncode < 0:
        try:
            name = f" {signal.Signals(-returncode).name}"
        except ValueError:
            name = ""
        return f"returncode {returncode}: killed by signal {-returncode}{name} (out of memory?)"
    return f"returncode {returncode}"


def run_worker(workload: str, path: str, args: argparse.Namespace) -> dict[str, Any]:
    """``workload`` on ``path`` in a fresh interpreter; its result with ``peak_rss_gb``. Raises
    ``WorkerFailed`` (its return code, or its signal, and the end of its stderr) when it fails."""
    command = [sys.executable, __file__, "--worker", workload, "--path", path, *args.passthrough]
    log(f"{workload} ({path}) ...")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise WorkerFailed(workload, path, f"failed, {exit_cause(done.returncode)}", stderr_tail(done.stderr))
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise WorkerFailed(workload, path, "printed no JSON result", stderr_tail(done.stderr)) from None
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
        same = _close(old["loss"], new["loss"]) and _close(old["grad_norm"], new["grad_norm"], floor=0.0)
    return round(speedup, 2), same


def _close(a: float, b: float, rel: float = 1e-5, floor: float = 1e-6) -> bool:
    """Equal within ``rel`` of their size, that size at least ``floor``. A GRPO loss is ~1e-8 on its
    first step (advantages sum to zero per group), so a loss is compared in absolute terms below
    1e-6 and the gradient norm carries the check: the norm is compared with ``floor=0``, relative
    to its own size however small (an SFT or DPO norm is ~1, where the floor never mattered), so a
    tiny GRPO norm (reported in its row's ``note``) cannot pass by being below an absolute floor.
    NaN (no norm: clipping off) is never close."""
    return abs(a - b) <= rel * max(abs(a), abs(b), floor)


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
            summary = exc.summary if isinstance(exc, WorkerFailed) else str(exc).splitlines()[-1]
            line["rows"][workload] = {"error": summary[:500]}
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
