"""The ``knowlyr-hub`` command.

knowlyr-hub export --format sft  -t trajectories.jsonl -o sft_train.jsonl
knowlyr-hub export --format dpo  -t trajectories.jsonl [-p preferences.jsonl] -o dpo_train.jsonl
knowlyr-hub export --format grpo -t trajectories.jsonl -o grpo_train.jsonl
knowlyr-hub dedup -t trajectories.jsonl -o unique.jsonl [--store cas/]
knowlyr-hub evaluate -t run.jsonl
knowlyr-hub compare -t agent_a.jsonl -t agent_b.jsonl
knowlyr-hub collect ENV_ID --endpoint URL --model NAME -n 20 -o trajectories.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from knowlyrcore import KnowlyrError, read_trajectories, write_trajectories


def _cmd_export(args: argparse.Namespace) -> int:
    from trajectoryhub.export import DatasetExporter

    exporter = DatasetExporter(args.trajectories)
    if args.format == "sft":
        report = exporter.export_sft(args.output, format=args.sft_format, min_reward=args.min_reward,
                                     success_only=args.success_only)  # fmt: skip
    elif args.format == "dpo":
        report = exporter.export_dpo(args.output, preferences=args.preferences, min_margin=args.min_margin)
    else:
        report = exporter.export_grpo(args.output, min_group_size=args.min_group_size)
    skipped = ", ".join(f"{n} {why}" for why, n in report.skipped.items()) or "none"
    print(f"{args.format}: wrote {report.written} records to {args.output} (skipped: {skipped})", file=sys.stderr)
    return 0


def _cmd_dedup(args: argparse.Namespace) -> int:
    from trajectoryhub.dedup import ContentStore, dedup

    items = [t for path in args.trajectories for t in read_trajectories(path)]
    unique = list(dedup(items))
    write_trajectories(args.output, unique)
    if args.store:
        store = ContentStore(args.store)
        new = sum(store.put(t)[1] for t in unique)
        print(f"store {args.store}: {new} new, {len(store)} total", file=sys.stderr)
    print(f"{len(items)} trajectories, {len(unique)} unique -> {args.output}", file=sys.stderr)
    return 0


def _load_runs(paths: list[str]) -> dict[str, list]:
    runs: dict[str, list] = {}
    for path in paths:
        items = list(read_trajectories(path))
        name = (items[0].agent if items and items[0].agent else "") or Path(path).stem
        if name in runs:
            name = Path(path).stem
        runs[name] = items
    return runs


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from trajectoryhub.evaluate import evaluate_agent

    for name, items in _load_runs(args.trajectories).items():
        print(json.dumps(evaluate_agent(items, agent=name).to_dict()))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from trajectoryhub.evaluate import compare_agents

    result = compare_agents(_load_runs(args.trajectories), alpha=args.alpha)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'rank':>4}  {'agent':24} {'reward':>8} {'success':>8} {'n':>5}")
    for row in result["leaderboard"]:
        success = "-" if row["success_rate"] is None else f"{row['success_rate']:.1%}"
        mark = " *" if row["beats_next"] else ""
        print(f"{row['rank']:>4}  {row['agent']:24} {row['avg_reward']:8.3f} {success:>8} {row['episodes']:>5}{mark}")
    for c in result["comparisons"]:
        print(f"{c['a']} vs {c['b']}: diff {c['diff']:+.3f}, Welch p={c['welch_p_bonferroni']:.3g}, "
              f"Mann-Whitney p={c['mannwhitney_p_bonferroni']:.3g} (Bonferroni)")  # fmt: skip
    print("* lead over the next agent is significant (Welch, Bonferroni-corrected)")
    return 0


def _cmd_pipeline(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from trajectoryhub.pipeline import Pipeline

    pipeline = Pipeline(domain=args.domain, log_format=args.log_format, skip_invalid=not args.strict,
                        formats=tuple(args.formats), min_margin=args.min_margin)  # fmt: skip
    report = pipeline.run(args.inputs, args.output_dir)
    print(json.dumps(asdict(report), indent=2))
    return 0


def _cmd_collect(args: argparse.Namespace) -> int:
    from trajectoryhub.policy import OpenAIPolicy
    from trajectoryhub.rollout import collect

    tasks = (
        [json.loads(line) for line in Path(args.tasks).read_text().splitlines() if line.strip()] if args.tasks else None
    )
    reward_fn = None
    if args.reward_domain:
        from trajectoryhub.rewards import make_reward_fn

        reward_fn = make_reward_fn(args.reward_domain)
    trajectories = collect(
        args.env_id, agent_factory=lambda: OpenAIPolicy(model=args.model, base_url=args.endpoint, api_key=args.api_key,
                                                        system_prompt=args.system_prompt),
        n_episodes=args.n_episodes, tasks=tasks, max_steps=args.max_steps, reward_fn=reward_fn,
        concurrency=args.concurrency, agent_name=args.agent_name or args.model, model_name=args.model,
        output_path=args.output,
    )  # fmt: skip
    print(f"collected {len(trajectories)} trajectories -> {args.output}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="knowlyr-hub", description="Rollouts, datasets and evaluation for agents.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("export", help="export trajectories as an SFT, DPO or GRPO dataset")
    p.add_argument("--format", required=True, choices=["sft", "dpo", "grpo"])
    p.add_argument("-t", "--trajectories", required=True, nargs="+", help="trajectory JSONL files or folders")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("-p", "--preferences", help="DPO: preference pairs from `knowlyr-reward pairs`")
    p.add_argument("--sft-format", choices=["steps", "messages"], default="steps")
    p.add_argument("--min-reward", type=float, help="SFT: keep trajectories with at least this reward")
    p.add_argument("--success-only", action="store_true", help="SFT: keep only successful trajectories")
    p.add_argument("--min-margin", type=float, default=0.1, help="DPO: minimum reward gap of a pair")
    p.add_argument("--min-group-size", type=int, default=2, help="GRPO: minimum attempts per task")
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser("dedup", help="drop duplicate episodes (content hash); optionally keep a CAS store")
    p.add_argument("-t", "--trajectories", required=True, nargs="+")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--store", help="content-addressed store folder to add the unique trajectories to")
    p.set_defaults(func=_cmd_dedup)

    p = sub.add_parser("evaluate", help="success rate, mean reward with a 95%% CI, mean steps")
    p.add_argument("-t", "--trajectories", required=True, action="append", help="one run (repeatable)")
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser("compare", help="compare agents with significance tests and a leaderboard")
    p.add_argument("-t", "--trajectories", required=True, action="append", help="one agent's run (repeat)")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser("pipeline", help="agent logs -> trajectories -> scored -> deduplicated -> SFT/DPO/GRPO")
    p.add_argument("inputs", nargs="+", help="log or trajectory files, folders or globs")
    p.add_argument("-o", "--output-dir", required=True)
    p.add_argument("--domain", help="rubric weights of this domain (default: each task's domain)")
    p.add_argument("--log-format", default="auto", help="a knowlyr-recorder format name, or auto")
    p.add_argument("--formats", nargs="+", default=["sft", "dpo", "grpo"], choices=["sft", "dpo", "grpo"])
    p.add_argument("--min-margin", type=float, default=0.1)
    p.add_argument("--strict", action="store_true", help="stop at the first unreadable input instead of skipping it")
    p.set_defaults(func=_cmd_pipeline)

    p = sub.add_parser("collect", help="roll out an OpenAI-compatible policy in an environment")
    p.add_argument("env_id")
    p.add_argument("--endpoint", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", required=True)
    p.add_argument("--api-key")
    p.add_argument("--tasks", help="JSONL of tasks (cycled over the episodes)")
    p.add_argument("-n", "--n-episodes", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=30)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--system-prompt")
    p.add_argument("--agent-name")
    p.add_argument("--reward-domain", help="score steps with knowlyr-reward's rules for this domain")
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=_cmd_collect)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (KnowlyrError, ValueError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
