"""The ``knowlyr-reward`` command.

knowlyr-reward score TRAJ.jsonl --domain coding -o scored.jsonl [--judge-url URL --judge-model M]
knowlyr-reward pairs SCORED.jsonl -o preferences.jsonl --min-margin 0.1
knowlyr-reward calibrate SCORED.jsonl [--labels labels.jsonl] -o calibration.json
knowlyr-reward rubrics [--domain coding]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from agentreward.errors import RewardError, TrajectoryFormatError


def _engine(args: argparse.Namespace):
    from agentreward.calibration import Calibrator
    from agentreward.engine import RewardEngine
    from agentreward.judge import Judge
    from agentreward.rubrics import load_weights

    judge = None
    if args.judge_url or args.judge_model:
        if not args.judge_model:
            raise RewardError("--judge-url needs --judge-model (the model name the endpoint serves)")
        judge = Judge(model=args.judge_model, base_url=args.judge_url, api_key=args.judge_api_key,
                      provider=args.judge_provider)  # fmt: skip
    weights = load_weights(args.weights) if args.weights else None  # refuses NaN/Infinity weights
    return RewardEngine(
        domain=args.domain,
        weights=weights,
        judge=judge,
        calibrator=Calibrator.load(args.calibration) if args.calibration else None,
        outcome_weight=args.outcome_weight,
    )


def _cmd_score(args: argparse.Namespace) -> int:
    from agentreward.trajectories import read_trajectories, write_jsonl

    engine = _engine(args)
    trajectories = _nonempty(read_trajectories(args.input), args.input)
    count = write_jsonl(args.output, _progress(engine.score_many(trajectories), args.quiet))
    print(f"scored {count} trajectories -> {args.output}", file=sys.stderr)
    if engine.judge is not None:
        print(
            f"judge: {engine.judge.calls} calls, {len(engine.judge.failures)} steps kept rule scores", file=sys.stderr
        )
    return 0


def _nonempty(records, path: str):
    """Pass ``records`` through; an input with none is an error (and, raised inside the atomic
    write, it leaves an existing output untouched)."""
    empty = True
    for record in records:
        empty = False
        yield record
    if empty:
        raise TrajectoryFormatError(path, None, "no trajectories (empty file)")


def _progress(items, quiet: bool):
    for n, item in enumerate(items, start=1):
        if not quiet and n % 50 == 0:
            print(f"  {n} scored…", file=sys.stderr)
        yield item


def _cmd_pairs(args: argparse.Namespace) -> int:
    from agentreward.preferences import build_preference_pairs
    from agentreward.trajectories import read_trajectories, write_jsonl

    pairs = build_preference_pairs(_nonempty(read_trajectories(args.input), args.input), min_margin=args.min_margin,
                                   max_pairs_per_task=args.max_pairs_per_task)  # fmt: skip
    write_jsonl(args.output, pairs)
    print(f"{len(pairs)} preference pairs -> {args.output}", file=sys.stderr)
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from agentreward.calibration import Calibrator, labels_from_metadata, load_labels
    from agentreward.trajectories import read_trajectories

    external = load_labels(args.labels) if args.labels else {}
    rubric_scores, human, baseline = [], [], []
    for trajectory in _nonempty(read_trajectories(args.input), args.input):
        labels = labels_from_metadata(trajectory)
        for (tid, index), score in external.items():
            if tid == trajectory.get("id"):
                labels[index] = score
        for index, score in labels.items():
            step = trajectory["steps"][index] if index < len(trajectory["steps"]) else None
            if step is None or "rubric_scores" not in step:
                raise RewardError(
                    f"{args.input}: trajectory {trajectory.get('id')!r} step {index}: not scored; run `score` first"
                )
            rubric_scores.append(step["rubric_scores"])
            baseline.append(step["reward"])
            human.append(score)
    calibrator = Calibrator.fit(rubric_scores, human, baseline=baseline)
    calibrator.save(args.output)
    print(json.dumps(calibrator.report, indent=2))
    return 0


def _cmd_rubrics(args: argparse.Namespace) -> int:
    from agentreward.rubrics import RUBRICS, domain_weights

    weights = domain_weights(args.domain)
    for name, rubric in RUBRICS.items():
        print(f"{name:18} {rubric.evaluator:5}  weight {weights[name]:.2f}  {rubric.description}")
    return 0


def _cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from knowlyrcore.mcp import run_module
    except ModuleNotFoundError:  # knowlyr-core comes with the mcp extra
        print("knowlyr-reward mcp needs the MCP SDK: pip install 'knowlyr-reward[mcp]'", file=sys.stderr)
        return 2
    return run_module("knowlyr-reward", "agentreward.mcp_server", args.server_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="knowlyr-reward", description="Process reward model for agent trajectories.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("score", help="score trajectories step by step")
    p.add_argument("input", help="trajectory JSONL (or a .json file)")
    p.add_argument("-o", "--output", required=True, help="scored trajectory JSONL")
    p.add_argument("--domain", help="rubric weights of this domain (default: each trajectory's task.domain)")
    p.add_argument("--weights", help="YAML/JSON file of rubric weights, overriding the domain's")
    p.add_argument("--outcome-weight", type=float, default=0.4, help="share of the outcome in the total (default 0.4)")
    p.add_argument("--judge-url", help="OpenAI-compatible (or Anthropic) base URL of the LLM judge")
    p.add_argument("--judge-model", help="model name for the judge")
    p.add_argument("--judge-api-key", help="API key for the judge endpoint")
    p.add_argument("--judge-provider", choices=["openai", "anthropic"], default="openai")
    p.add_argument("--calibration", help="calibration file from `knowlyr-reward calibrate`")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=_cmd_score)

    p = sub.add_parser("pairs", help="build DPO preference pairs from scored trajectories")
    p.add_argument("input")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--min-margin", type=float, default=0.1)
    p.add_argument("--max-pairs-per-task", type=int)
    p.set_defaults(func=_cmd_pairs)

    p = sub.add_parser("calibrate", help="fit rubric weights to human step labels")
    p.add_argument("input", help="scored trajectory JSONL")
    p.add_argument("--labels", help="JSONL of {trajectory_id, step_index, score}; step metadata labels are used too")
    p.add_argument("-o", "--output", required=True, help="calibration JSON to write")
    p.set_defaults(func=_cmd_calibrate)

    p = sub.add_parser("rubrics", help="list rubrics and a domain's weights")
    p.add_argument("--domain", default="generic")
    p.set_defaults(func=_cmd_rubrics)

    # every argument goes to the server's own parser (`mcp --help` lists them): no prefix char matches
    p = sub.add_parser("mcp", help="run the MCP server over stdio (extra: mcp)", add_help=False, prefix_chars="\0")
    p.add_argument("server_args", nargs="*")
    p.set_defaults(func=_cmd_mcp)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (RewardError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: {exc.filename or '<io>'}: {exc.strerror or exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
