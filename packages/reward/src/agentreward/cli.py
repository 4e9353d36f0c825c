"""The ``knowlyr-reward`` command.

knowlyr-reward score TRAJ.jsonl --domain coding [-o scored.jsonl] [--preset seed-003] [--judge-url URL --judge-model M]
knowlyr-reward score TRAJ.jsonl --layers rules,learned --prm runs/prm   (+ a trained process reward model)
knowlyr-reward eval LABELLED.jsonl [--domain D] [--preset P] [--layers L --prm PATH]   (how well rewards predict known labels)
knowlyr-reward pairs SCORED.jsonl -o preferences.jsonl [--pairing best_vs_worst|all_above_margin] [--min-margin 0.1]
knowlyr-reward calibrate SCORED.jsonl [--labels labels.jsonl] -o calibration.json
knowlyr-reward rubrics [--domain coding]
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import click

from agentreward.errors import RewardError, TrajectoryFormatError, UnscoredError
from knowlyrcore.clikit import Group, mcp_command, pairing_options, run
from knowlyrcore.errors import no_such_file


@click.group(cls=Group)
@click.version_option(package_name="knowlyr-reward")
def cli() -> None:
    """Process reward model for agent trajectories: rules, LLM judge, human calibration, a learned model."""


def _engine(options: dict[str, Any]):
    from agentreward.calibration import Calibrator
    from agentreward.engine import RewardEngine
    from agentreward.judge import Judge
    from agentreward.rubrics import load_weights

    layers = options["layers"]
    # the engine refuses these too; here they are worded with the options that fix them
    if "learned" in layers and not options["prm"]:
        raise click.UsageError("--layers learned needs --prm PATH (a checkpoint of `knowlyr-trainer prm`)")
    if options["prm"] and "learned" not in layers:
        raise click.UsageError("--prm is the learned layer's checkpoint: add learned to --layers")
    if "judge" in layers and not options["judge_model"]:
        raise click.UsageError("--layers judge needs --judge-model (and --judge-url for a local endpoint)")
    if "calibration" in layers and not options["calibration"]:
        raise click.UsageError("--layers calibration needs --calibration FILE (from `knowlyr-reward calibrate`)")
    judge = None
    if options["judge_url"] or options["judge_model"]:
        if not options["judge_model"]:
            raise click.UsageError("--judge-url needs --judge-model (the model name the endpoint serves)")
        try:
            judge = Judge(
                model=options["judge_model"],
                base_url=options["judge_url"],
                api_key=options["judge_api_key"],
                provider=options["judge_provider"],
                mode=options["judge_mode"],
                max_retries=options["judge_retries"],
                max_tokens=options["judge_max_tokens"],
                verdict=options["judge_verdict"],
                call_deadline=options["judge_deadline"],
                run_deadline=options["judge_run_deadline"],
            )
        except ValueError as exc:  # e.g. a NaN deadline, which click's FloatRange lets through
            raise click.UsageError(str(exc)) from None
    weights = load_weights(options["weights"]) if options["weights"] else None  # refuses NaN/Infinity weights
    if options["dimension_weights"] is not None and options["preset"] != "seed-003":
        raise click.UsageError("--dimension-weights weighs the seed-003 preset's dimensions: add --preset seed-003")
    return RewardEngine(
        domain=options["domain"],
        layers=layers,
        weights=weights,
        judge=judge,
        calibrator=Calibrator.load(options["calibration"]) if options["calibration"] else None,
        prm=options["prm"],
        outcome_weight=options["outcome_weight"],
        preset=options["preset"],
        conversation_rules=options["conversation_rules"],
        dimension_weights=options["dimension_weights"],
    )


def _read_all(path: str) -> Iterator[dict[str, Any]]:
    """The trajectories of ``path``, streamed; an input with none is an error. Raised inside an
    atomic write, any error leaves an existing output untouched."""
    from agentreward.trajectories import read_trajectory_dicts

    empty = True
    for record in read_trajectory_dicts(path):
        empty = False
        yield record
    if empty:
        raise TrajectoryFormatError(path, None, "no trajectories (empty file)")


class _Progress:
    """The engine's ``score_record``, saying on stderr how far scoring got: every 50
    trajectories, or every one when a judge scores (a call can take seconds on a local model)."""

    def __init__(self, engine: Any, quiet: bool) -> None:
        self.engine, self.quiet, self.done = engine, quiet, 0

    def score_record(self, record: dict[str, Any]) -> dict[str, Any]:
        scored = self.engine.score_record(record)
        self.done += 1
        judge = self.engine.judge
        if not self.quiet and (judge is not None or self.done % 50 == 0):
            calls = f" (judge: {judge.calls} calls, {len(judge.failures)} abstentions)" if judge is not None else ""
            click.echo(f"  {self.done} scored…{calls}", err=True)
        return scored


def _existing(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A path option or argument (or several) that must exist: else ``path: no such file or
    directory`` (exit 2), worded as in every knowlyr command, before anything is read or written."""
    for path in value if isinstance(value, tuple) else [value]:
        if path is not None and not os.path.lexists(path):
            raise RewardError(no_such_file(path))
    return value


INPUT = click.argument("input_path", metavar="INPUT", type=click.Path(dir_okay=False), callback=_existing)
OUTPUT = click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), help="File to write (atomically)."
)


def _json_mapping(ctx: Any, param: Any, value: str | None) -> dict[str, float] | None:
    """A JSON object of name -> number given inline on the command line."""
    if value is None:
        return None
    try:
        data = json.loads(value)
    except ValueError:
        raise click.BadParameter("not valid JSON (give an object such as '{\"task_completion\": 0.5}')") from None
    if not isinstance(data, dict) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in data.values()
    ):
        raise click.BadParameter("must be a JSON object of dimension name to number")
    return {str(k): float(v) for k, v in data.items()}


def _layer_names(ctx: Any, param: Any, value: str) -> tuple[str, ...]:
    """``rules,learned`` -> ``("rules", "learned")``, each a known layer."""
    from agentreward.engine import LAYERS

    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in LAYERS]
    if unknown or not names:
        raise click.BadParameter(f"{unknown[0] if unknown else value!r}: name layers among {', '.join(LAYERS)}")
    return names


def engine_options(command: Any) -> Any:
    """The options that build a ``RewardEngine`` (shared by ``score`` and ``eval``)."""
    from agentreward.presets import PRESETS

    options = [
        click.option(
            "--layers",
            default="rules",
            show_default=True,
            callback=_layer_names,
            metavar="L1,L2",
            help="The layers that score, comma-separated: rules, judge, calibration, learned. With the "
            "rule layers and learned both, each step reward and the total are the mean of the two. "
            "--judge-model and --calibration switch their layer on by themselves.",
        ),
        click.option(
            "--prm",
            callback=_existing,
            metavar="PATH",
            help="The learned layer's checkpoint directory (from `knowlyr-trainer prm`; needs "
            "knowlyr-reward[learned]).",
        ),
        click.option("--domain", help="Rubric weights of this domain (default: each trajectory's task.domain)."),
        click.option(
            "--weights", callback=_existing, help="YAML/JSON file of rubric weights, overriding the domain's."
        ),
        click.option(
            "--preset",
            type=click.Choice(PRESETS),
            default="default",
            show_default=True,
            help="How the total is composed: the step mean, or seed 003's five weighted dimensions.",
        ),
        click.option(
            "--dimension-weights",
            callback=_json_mapping,
            metavar="JSON",
            help="seed-003 preset: the five dimensions' weights, e.g. '{\"task_completion\": 0.5, "
            '"tool_accuracy": 0.3, "efficiency": 0.2}\' (those left out weigh 0).',
        ),
        click.option(
            "--outcome-weight",
            type=click.FloatRange(0, 1),
            default=0.4,
            show_default=True,
            help="Share of the outcome in the total (default preset).",
        ),
        click.option("--judge-url", help="OpenAI-compatible (or Anthropic) base URL of the LLM judge."),
        click.option("--judge-model", help="Model name for the judge."),
        click.option("--judge-api-key", help="API key for the judge endpoint."),
        click.option(
            "--judge-provider", type=click.Choice(["openai", "anthropic"]), default="openai", show_default=True
        ),
        click.option(
            "--judge-mode",
            type=click.Choice(["step", "trajectory", "both"]),
            default="step",
            show_default=True,
            help="Judge each step, the whole trajectory once, or both.",
        ),
        click.option(
            "--judge-verdict",
            type=click.Choice(["text", "logprobs"]),
            default="text",
            show_default=True,
            help="text: the judge writes its scores (JSON). logprobs: it answers Yes or No and the score is "
            "P(Yes) from the endpoint's top_logprobs (OpenAI, vLLM, knowlyr-trainer serve): graded scores from "
            "small models that write no numbers, one token per call.",
        ),
        click.option(
            "--judge-retries",
            type=click.IntRange(0),
            default=2,
            show_default=True,
            help="How many times to ask again after an unusable reply or a transport error before the judge abstains "
            "(retries after an unusable reply sample at temperature 0.7; the first request is greedy; the logprobs "
            "verdict retries only transport errors).",
        ),
        click.option(
            "--judge-max-tokens",
            type=click.IntRange(1),
            default=96,
            show_default=True,
            help="Longest judge reply in tokens (a rubric JSON needs about 40).",
        ),
        click.option(
            "--judge-deadline",
            type=click.FloatRange(0, min_open=True),
            default=120.0,
            show_default=True,
            help="Seconds a judge call may take in all (the endpoint's reply is untrusted: one that trickles in "
            "is cut off here and the step abstains, as after an unusable reply).",
        ),
        click.option(
            "--judge-run-deadline",
            type=click.FloatRange(0),
            default=None,
            help="Seconds from the first judge call after which every further call abstains (default: no limit).",
        ),
        click.option("--calibration", callback=_existing, help="Calibration file from `knowlyr-reward calibrate`."),
        click.option(
            "--conversation-rules",
            is_flag=True,
            help="Let the conversation rules (unconfirmed or invented-id actions, needless transfers, ...) "
            "lower step scores and the total; without it they only flag steps.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@cli.command("score")
@INPUT
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="JSONL file to write (atomically); default: JSON lines on stdout.",
)
@engine_options
@click.option("-q", "--quiet", is_flag=True, help="No progress lines.")
def score_command(input_path: str, output: str | None, quiet: bool, **options: Any) -> None:
    """Score trajectories step by step (INPUT: trajectory JSONL, or a .json file holding one
    trajectory or a list)."""
    from agentreward.trajectories import dumps_strict
    from knowlyrcore.jsonl import write_jsonl

    engine = _engine(options)
    trajectories = _read_all(input_path)
    if output is None:
        scored = list(map(_Progress(engine, quiet).score_record, trajectories))  # all or nothing on stdout
        for number, record in enumerate(scored, start=1):
            click.echo(dumps_strict(record, "<stdout>", number))
        count = len(scored)
    else:
        count = write_jsonl(output, map(_Progress(engine, quiet).score_record, trajectories))
    click.echo(f"scored {count} trajectories -> {output or 'stdout'}", err=True)
    if engine.judge is not None:
        click.echo(f"judge: {engine.judge.calls} calls, {len(engine.judge.failures)} steps kept rule scores", err=True)


@cli.command("eval")
@click.argument(
    "input_paths", metavar="LABELLED...", nargs=-1, required=True, type=click.Path(dir_okay=False), callback=_existing
)
@engine_options
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Also write the report here (JSON).")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines.")
def eval_command(input_paths: tuple[str, ...], output: str | None, quiet: bool, **options: Any) -> None:
    """How well the rewards predict known labels: score labelled trajectories with outcome and
    labels hidden, with the layers of --layers, print one JSON line with the ROC AUC for success,
    the rank correlation with outcome.score and, for steps labelled metadata.mistake (Who&When),
    how often the lowest-rewarded step is the mistake."""
    from agentreward.quality import evaluate
    from agentreward.trajectories import dumps_strict, write_atomically

    engine = _engine(options)

    def labelled() -> Iterator[dict[str, Any]]:
        for path in input_paths:
            yield from _read_all(path)

    report = {
        "inputs": list(input_paths),
        "layers": list(engine.layers),
        "preset": engine.preset,
        "judge": options["judge_model"],
        "prm": options["prm"],
        **evaluate(_Progress(engine, quiet), labelled()),
    }
    if engine.judge is not None:  # how much of the figure is the judge's and how much the rules'
        report["judge_calls"] = engine.judge.calls
        report["judge_abstentions"] = len(engine.judge.failures)
    line = dumps_strict(report, output or "<stdout>")
    if output:
        write_atomically(output, lambda out: out.write(line + "\n"))
    click.echo(line)


@cli.command("pairs")
@INPUT
@OUTPUT
@pairing_options()
def pairs_command(
    input_path: str, output: str, pairing: str, min_margin: float, max_pairs_per_task: int | None
) -> None:
    """Build DPO preference pairs from scored trajectories."""
    from agentreward.preferences import build_preference_pairs
    from knowlyrcore.jsonl import write_jsonl

    scored = list(_read_all(input_path))  # pairs need every trajectory of a task: all are read first
    try:
        pairs = build_preference_pairs(
            scored, pairing=pairing, min_margin=min_margin, max_pairs_per_task=max_pairs_per_task
        )
    except UnscoredError as exc:
        raise UnscoredError(f"{input_path}: {exc}") from None
    write_jsonl(output, pairs)
    click.echo(f"{len(pairs)} preference pairs -> {output}", err=True)


@cli.command("calibrate")
@INPUT
@click.option(
    "--labels",
    type=click.Path(dir_okay=False),
    callback=_existing,
    help="JSONL of {trajectory_id, step_index, score}; step metadata labels are used too.",
)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Calibration JSON to write.")
def calibrate_command(input_path: str, labels: str | None, output: str) -> None:
    """Fit rubric weights to human step labels (INPUT: scored trajectory JSONL)."""
    from agentreward.calibration import Calibrator, labels_from_metadata, load_labels

    external = load_labels(labels) if labels else {}
    rubric_scores, human, baseline = [], [], []
    for trajectory in _read_all(input_path):
        step_labels = labels_from_metadata(trajectory)
        for (tid, index), value in external.items():
            if tid == trajectory.get("id"):
                step_labels[index] = value
        for index, value in step_labels.items():
            step = trajectory["steps"][index] if index < len(trajectory["steps"]) else None
            if step is None or "rubric_scores" not in step:
                raise UnscoredError(
                    f"{input_path}: trajectory {trajectory.get('id')!r} step {index}: not scored; run `score` first"
                )
            rubric_scores.append(step["rubric_scores"])
            baseline.append(step["reward"])
            human.append(value)
    calibrator = Calibrator.fit(rubric_scores, human, baseline=baseline)
    calibrator.save(output)
    click.echo(json.dumps(calibrator.report, indent=2))


@cli.command("rubrics")
@click.option("--domain", default="generic", show_default=True)
def rubrics_command(domain: str) -> None:
    """List rubrics and a domain's weights."""
    from agentreward.rubrics import RUBRICS, domain_weights

    weights = domain_weights(domain)
    for name, rubric in RUBRICS.items():
        click.echo(f"{name:18} {rubric.evaluator:5}  weight {weights[name]:.2f}  {rubric.description}")


cli.add_command(mcp_command("knowlyr-reward", "agentreward.mcp_server"))


def main(argv: Sequence[str] | None = None) -> int:
    return run(cli, argv, prog_name="knowlyr-reward")


if __name__ == "__main__":
    sys.exit(main())
