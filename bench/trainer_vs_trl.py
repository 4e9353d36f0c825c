"""knowlyr-trainer vs TRL: SFT and DPO tokens/s and peak memory on SmolLM2-135M-Instruct.

Both sides get the same model (the embedded SmolLM2-135M, fp32 weights), the same rows, batch
size, maximum length, learning rate, step count and loss (assistant tokens only: TRL's
prompt-completion format with ``completion_only_loss``; ours masks everything but the
assistant turn), each at its best setting on this CPU: bf16 autocast, no gradient
checkpointing; for SFT both are padding-free (TRL's ``padding_free=True`` flattens each batch
into one row and transformers masks it block-diagonally: ~1.3x faster than its padded batches
here, same loss; ours packs and runs attention per sequence); TRL's DPO has no padding-free mode
at present (it falls back to padding), ours packs; for DPO both precompute reference log-probs
once (TRL's ``precompute_ref_log_probs``). Every run is a fresh subprocess, so peak RSS
(``ru_maxrss``) is that run's own. Throughput is reported per wall second and per CPU second of
the worker (the latter is steadier when other jobs share the machine). Timed: trainer construction (tokenisation, DPO reference
pre-pass) + training, excluding model loading and our final save; tokens are the real (unpadded)
tokens of the sequences trained on.

    python bench/trainer_vs_trl.py [--steps 8] [--batch-size 4] [--max-length 512]

Each side runs ``--repeats`` times (alternating which goes first); the JSON line gives the median
tokens/s per side, their ratio, the per-repeat ratios and the largest peak RSS of each side.

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL = "smollm2-135m"
TOOLS = ["read_file", "grep", "edit_file", "run_tests", "bash", "list_dir"]


def make_rows(n: int, seed: int) -> list[dict]:
    """Agent-like prompt/completion pairs; like real trajectories, they have 1-8 steps (~60-450 tokens)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        task = f"Task {i}: the test tests/test_module_{rng.randrange(50)}.py fails with an IndexError in " + " ".join(
            rng.choice(["sort", "merge", "parse", "split", "index", "buffer", "offset", "range"])
            for _ in range(rng.randint(5, 30))
        )
        steps = []
        for j in range(rng.randint(1, 8)):
            tool = rng.choice(TOOLS)
            steps.append(
                f"Thought: step {j}, I will use {tool} to inspect "
                + " ".join(rng.choice(["the", "loop", "bound", "index", "list", "file", "value"]) for _ in range(12))
                + f"\nAction: {tool} src/pkg/module_{rng.randrange(20)}.py"
            )
        chosen = "\n".join(steps)
        rejected = "\n".join(reversed(steps[: rng.randint(1, len(steps))])) + "\nAction: rm -rf /"
        rows.append({"prompt": task, "completion": chosen, "rejected": rejected})
    return rows


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


# ------------------------------------------------------------------------------------ workers
def worker(kind: str, data: Path, args: argparse.Namespace) -> dict:
    import torch

    from agenttrainer.models import load_model_and_tokenizer

    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer(MODEL, torch_dtype=torch.float32)
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    out = Path(tempfile.mkdtemp(prefix=f"bench-{kind}-"))
    common = dict(learning_rate=1e-5, seed=0)
    ours = dict(
        output_dir=str(out),
        batch_size=args.batch_size,
        max_length=args.max_length,
        bf16=True,
        num_epochs=100,  # max_optimizer_steps ends the run
        max_optimizer_steps=args.steps,
        lr_scheduler="constant",
        warmup_ratio=0.0,
        progress_bar=False,
        **common,
    )
    started, cpu_started = time.perf_counter(), _cpu_seconds()
    if kind == "ours-sft":
        from agenttrainer import SFTConfig
        from agenttrainer.trainers.sft import SFTTrainer

        path = out / "sft.jsonl"
        path.write_text(
            "".join(
                json.dumps(
                    {
                        "messages": [
                            {"role": "user", "content": r["prompt"]},
                            {"role": "assistant", "content": r["completion"]},
                        ]
                    }
                )
                + "\n"
                for r in rows
            )
        )
        config = SFTConfig(train_file=str(path), packing=not args.no_packing, **ours)
        trainer = SFTTrainer(config, model=model, tokenizer=tok)
        _, saved = _run_ours(trainer)
        examples = trainer.load_examples(str(path))[0]
        tokens = sum(len(examples[i]) for i in range(min(len(examples), args.steps * args.batch_size)))
        loss = _mean_train_loss(out)
    elif kind == "ours-dpo":
        from agenttrainer import DPOConfig
        from agenttrainer.trainers.dpo import DPOTrainer

        path = out / "dpo.jsonl"
        path.write_text(
            "".join(
                json.dumps({"prompt": r["prompt"], "chosen": r["completion"], "rejected": r["rejected"]}) + "\n"
                for r in rows
            )
        )
        config = DPOConfig(train_file=str(path), beta=0.1, **ours)
        trainer = DPOTrainer(config, model=model, tokenizer=tok)
        _, saved = _run_ours(trainer)
        pairs = trainer.load_pairs(str(path))[: args.steps * args.batch_size]
        tokens = sum(len(c) + len(r) for c, r in pairs)
        loss = _mean_train_loss(out)
    else:
        import datasets
        import trl

        trl_args = dict(
            output_dir=str(out),
            per_device_train_batch_size=args.batch_size,
            max_length=args.max_length,
            bf16=True,
            use_cpu=True,
            report_to=[],
            save_strategy="no",
            logging_steps=1,
            lr_scheduler_type="constant",
            warmup_steps=0,
            dataloader_num_workers=0,
            gradient_checkpointing=False,
            disable_tqdm=True,
            max_steps=args.steps,  # TRL's name for the optimizer steps of a run
            **common,
        )
        if kind == "trl-sft":
            ds = datasets.Dataset.from_list(
                [
                    {
                        "prompt": [{"role": "user", "content": r["prompt"]}],
                        "completion": [{"role": "assistant", "content": r["completion"]}],
                    }
                    for r in rows
                ]
            )
            # Padding-free does not truncate: every row must already fit, as it does in ours.
            lengths = [len(tok.apply_chat_template(r["prompt"] + r["completion"])["input_ids"]) for r in ds]
            if max(lengths) > args.max_length:
                raise SystemExit(f"a row has {max(lengths)} tokens > --max-length {args.max_length}")
            trainer = trl.SFTTrainer(
                model=model,
                args=trl.SFTConfig(completion_only_loss=True, padding_free=True, **{**trl_args, "max_length": None}),
                train_dataset=ds,
                processing_class=tok,
            )
        else:
            ds = datasets.Dataset.from_list(
                [
                    {
                        "prompt": [{"role": "user", "content": r["prompt"]}],
                        "chosen": [{"role": "assistant", "content": r["completion"]}],
                        "rejected": [{"role": "assistant", "content": r["rejected"]}],
                    }
                    for r in rows
                ]
            )
            trainer = trl.DPOTrainer(
                model=model,
                args=trl.DPOConfig(beta=0.1, precompute_ref_log_probs=True, **trl_args),
                train_dataset=ds,
                processing_class=tok,
            )
        output = trainer.train()
        saved = 0.0
        loss = output.training_loss
        # TRL's own count of non-padding tokens seen (chosen + rejected for DPO).
        tokens = int(float(max(h.get("num_tokens", 0) for h in trainer.state.log_history)))
    elapsed = time.perf_counter() - started - saved
    cpu = _cpu_seconds() - cpu_started - saved  # our final save is excluded (wall time bounds its CPU time)
    return {
        "kind": kind,
        "tokens": tokens,
        "seconds": round(elapsed, 2),
        "tokens_per_s": round(tokens / elapsed, 1),
        "tokens_per_cpu_s": round(tokens / cpu, 1),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "loss": loss,
    }


def _cpu_seconds() -> float:
    """User + system CPU time of this process (all threads): steadier than wall time on a shared machine."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _mean_train_loss(output_dir: Path) -> float:
    """Mean of the logged per-step losses: the same statistic as TRL's ``training_loss``."""
    rows = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss/train"] for r in rows if "loss/train" in r]
    return sum(losses) / len(losses)


def _run_ours(trainer) -> tuple[dict, float]:
    """Train; returns the result and the seconds spent writing the final model (excluded)."""
    save = trainer.save_model
    spent = [0.0]

    def timed_save(path):
        t = time.perf_counter()
        try:
            return save(path)
        finally:
            spent[0] += time.perf_counter() - t

    trainer.save_model = timed_save
    return trainer.train(), spent[0]


# ------------------------------------------------------------------------------------ driver
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--worker", choices=["ours-sft", "trl-sft", "ours-dpo", "trl-dpo"])
    parser.add_argument("--data")
    parser.add_argument(
        "--no-packing", action="store_true", help="ours: length-grouped padded batches instead of packing"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs per side, alternating which side goes first; medians are reported (shared VMs are noisy)",
    )
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, Path(args.data), args)), flush=True)
        return

    data = Path(tempfile.mkdtemp(prefix="bench-data-")) / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_rows(args.steps * args.batch_size, seed=0)))
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled"}
    runs: dict[str, list[dict]] = {}
    for method in ("sft", "dpo"):
        for r in range(args.repeats):
            order = ("ours", "trl") if r % 2 == 0 else ("trl", "ours")
            for side in order:
                kind = f"{side}-{method}"
                cmd = [sys.executable, __file__, "--worker", kind, "--data", str(data)]
                for flag in ("steps", "batch_size", "max_length"):
                    cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if proc.returncode != 0:
                    raise SystemExit(f"{kind} failed:\n{proc.stderr[-4000:]}")
                runs.setdefault(kind, []).append(json.loads(proc.stdout.strip().splitlines()[-1]))
    result = {
        "benchmark": "trainer_vs_trl",
        "model": MODEL,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "repeats": args.repeats,
    }
    for method in ("sft", "dpo"):
        ours, theirs = runs[f"ours-{method}"], runs[f"trl-{method}"]
        ours_tps = round(statistics.median(x["tokens_per_s"] for x in ours), 1)
        trl_tps = round(statistics.median(x["tokens_per_s"] for x in theirs), 1)
        ours_cpu = round(statistics.median(x["tokens_per_cpu_s"] for x in ours), 1)
        trl_cpu = round(statistics.median(x["tokens_per_cpu_s"] for x in theirs), 1)
        ours_mem = max(x["peak_rss_mb"] for x in ours)
        trl_mem = max(x["peak_rss_mb"] for x in theirs)
        result[method] = {
            "ours_tokens_per_s": ours_tps,
            "trl_tokens_per_s": trl_tps,
            "speedup": round(ours_tps / trl_tps, 2),  # ratio of the medians
            "speedup_per_repeat": [round(a["tokens_per_s"] / b["tokens_per_s"], 2) for a, b in zip(ours, theirs)],
            "ours_tokens_per_cpu_s": ours_cpu,
            "trl_tokens_per_cpu_s": trl_cpu,
            "speedup_cpu_time": round(ours_cpu / trl_cpu, 2),
            "ours_peak_rss_mb": ours_mem,  # the largest of the repeats
            "trl_peak_rss_mb": trl_mem,
            "memory_ratio": round(ours_mem / trl_mem, 2),
            "ours_tokens": ours[0]["tokens"],
            "trl_tokens": theirs[0]["tokens"],
            "ours_mean_train_loss": ours[0]["loss"],  # same rows, each side's own shuffling
            "trl_mean_train_loss": theirs[0]["loss"],
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
