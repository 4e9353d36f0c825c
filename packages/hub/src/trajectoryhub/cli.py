"""The ``knowlyr-hub`` command.

knowlyr-hub export --format sft  -t trajectories.jsonl -o sft_train.jsonl  [--min-reward R] [--include-failures]
knowlyr-hub export --format dpo  -t trajectories.jsonl [-p preferences.jsonl] -o dpo_train.jsonl  [--pairing P]
knowlyr-hub export --format grpo -t trajectories.jsonl -o grpo_train.jsonl
knowlyr-hub export --format atif -t trajectories.jsonl -o atif.jsonl      (also adp; extra: recorder)
knowlyr-hub dedup -t trajectories.jsonl -o unique.jsonl [--store cas/]
knowlyr-hub evaluate -t run.jsonl
knowlyr-hub compare -t agent_a.jsonl -t agent_b.jsonl
knowlyr-hub collect ENV_ID --endpoint URL --model NAME -n 20 -o trajectories.jsonl [--executor ray [--address ADDR]]
knowlyr-hub store add runs.jsonl [--db trajectories.db | --db postgresql://...]
knowlyr-hub store list [--domain D --agent A --success --min-reward R --order gdi|reward|time --limit N]
knowlyr-hub store export -o top.jsonl|top.parquet [filters]
knowlyr-hub store feedback HASH 0.9     (HASH: the 12 characters store list prints, or any unique 8+)
knowlyr-hub store stats
knowlyr-hub tasks --list
knowlyr-hub tasks retail --split test --n 50 --seed 0 -o tasks.jsonl
knowlyr-hub tasks mcp --server mcp-server-git --generator-url http://host/v1 [--generator-model M] -n 20 -o tasks.jsonl
knowlyr-hub evaluate --policy expert|smollm2-135m|./checkpoint|http://host/v1 --tasks tasks.jsonl \
    [--env ENV_ID] [--max-steps N] [--name NAME] [--samples K --temperature T] [--report-dir DIR] [-o trajectories.jsonl]
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click

from knowlyrcore import TaskInfo, read_jsonl, read_trajectories, write_jsonl, write_trajectories
from knowlyrcore.clikit import Group, mcp_command, pairing_options, run
from knowlyrcore.datasets import DEFAULT_MIN_MARGIN
from knowlyrcore.errors import DataFormatError, InputError, MissingExtraError
from knowlyrcore.jsonl import iter_json_lines

# C0 controls, DEL and C1 controls (ESC starts the sequences that clear the screen, retitle the
# window or worse; C1 CSI 0x9b is ESC [ on some terminals), and lone surrogates, which cannot be
# printed at all: each is written as a Python-style escape.
_UNPRINTABLE = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
_UNPRINTABLE.update({ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"})
_UNPRINTABLE.update({c: f"\\u{c:04x}" for c in range(0xD800, 0xE000)})


def shown(value: Any) -> str:
    """``value`` as text safe to print on a terminal: control characters escaped (``\\x1b``).

    Every human-facing listing of data that came from trajectories or models goes through this
    (JSON output is escaped by ``json.dumps`` already)."""
    return str(value).translate(_UNPRINTABLE)


def _read_all(paths: list[str], *, check: Any = None) -> list:
    """Trajectories of every file (folders: their *.jsonl); an input without any is an error.

    ``check(trajectory)`` returns ``(field, problem)`` for a trajectory to refuse, as
    ``path:line: field: problem``."""
    items: list = []
    for given in paths:
        files = sorted(Path(given).glob("*.jsonl")) if Path(given).is_dir() else [Path(given)]
        if not files:
            raise DataFormatError(given, None, "folder holds no .jsonl files")
        for path in files:
            found = list(read_trajectories(path))
            if not found:
                raise DataFormatError(str(path), None, "no trajectories (empty file)")
            for position, trajectory in enumerate(found if check else ()):
                problem = check(trajectory)
                if problem:
                    raise DataFormatError(str(path), _line_of(path, position), problem[1], field=problem[0])
            items.extend(found)
    return items


def _line_of(path: Path, position: int) -> int | None:
    """The line of the file's ``position``-th record (0-based; blank lines hold none)."""
    for index, (number, _) in enumerate(iter_json_lines(path)):
        if index == position:
            return number
    return None


FILES_HELP = "Trajectory JSONL files or folders (-t a.jsonl b.jsonl, or -t a.jsonl -t b.jsonl)."


def _files(given: tuple[str, ...], more: tuple[str, ...]) -> list[str]:
    """``-t a b c``: click reads ``-t a`` as the option and ``b c`` as arguments; both are files."""
    files = [*given, *more]
    if not files:
        raise click.UsageError("give at least one trajectory file with -t")
    return files


def trajectory_files(fn: Any) -> Any:
    fn = click.argument("more_files", nargs=-1, metavar="[FILES]...")(fn)
    return click.option("-t", "--trajectories", multiple=True, help=FILES_HELP)(fn)


def executor_options(local: str, what: str) -> Any:
    """``--executor``, ``local`` (the default) or ``ray`` (``what`` says where each plays the
    episodes), and ``--address``, the Ray cluster of ``ray``."""

    def decorate(fn: Any) -> Any:
        fn = click.option(
            "--address",
            help="Ray cluster address (default: start a local Ray runtime listening on 127.0.0.1 only; "
            "RAY_ADDRESS is honoured).",
        )(fn)
        return click.option(
            "--executor", type=click.Choice([local, "ray"]), default=local, show_default=True, help=what
        )(fn)

    return decorate


class HubGroup(Group):
    """The hub's library functions refuse unusable input with ``ValueError`` (no trajectories to
    evaluate, unscored runs, one agent to compare) and missing extras with ``ImportError`` naming
    the extra; at the command line both are bad input: one line, exit 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (ValueError, ImportError) as exc:
            if isinstance(exc, InputError):
                raise
            raise InputError(str(exc)) from exc


@click.group(cls=HubGroup)
@click.version_option(package_name="knowlyr-hub")
def cli() -> None:
    """Rollouts, datasets and evaluation for agents."""


@cli.command("export")
@click.option(
    "--format",
    "fmt",
    required=True,
    type=click.Choice(["sft", "dpo", "grpo", "atif", "adp"]),
    help="A training set (sft, dpo, grpo) or an interchange standard (atif, adp; extra: recorder).",
)
@trajectory_files
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Dataset JSONL to write.")
@click.option("-p", "--preferences", help="DPO: preference pairs from `knowlyr-reward pairs`.")
@click.option("--sft-format", type=click.Choice(["steps", "messages"]), default="steps", show_default=True)
@click.option("--min-reward", type=float, help="SFT, ATIF, ADP: keep trajectories with at least this reward.")
@click.option(
    "--include-failures",
    is_flag=True,
    help="SFT: keep failed and unjudged trajectories too (default: successful ones only).",
)
@click.option(
    "--success-only",
    is_flag=True,
    help="ATIF, ADP: keep only successful trajectories. SFT: the default (accepted for old commands).",
)
@pairing_options("DPO")
@click.option(
    "--min-group-size",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="GRPO: minimum attempts per task.",
)
def export_command(
    fmt: str,
    trajectories: tuple[str, ...],
    more_files: tuple[str, ...],
    output: str,
    preferences: str | None,
    sft_format: str,
    min_reward: float | None,
    include_failures: bool,
    success_only: bool,
    pairing: str,
    min_margin: float,
    max_pairs_per_task: int | None,
    min_group_size: int,
) -> None:
    """Export trajectories as an SFT, DPO or GRPO dataset, or as ATIF / ADP documents.

    SFT keeps successful trajectories only unless --include-failures; DPO and GRPO use failed
    attempts too (as rejected responses, as low-reward group members); ATIF and ADP convert all.
    """
    from trajectoryhub.export import DatasetExporter

    if include_failures and (fmt != "sft" or success_only):
        raise click.UsageError("--include-failures is for --format sft, without --success-only")
    exporter = DatasetExporter(trajectories=_read_all(_files(trajectories, more_files)))
    if fmt == "sft":
        report = exporter.export_sft(
            output, format=sft_format, min_reward=min_reward, include_failures=include_failures
        )
    elif fmt in ("atif", "adp"):
        report = exporter.export_interchange(output, to=fmt, min_reward=min_reward, success_only=success_only)
    elif fmt == "dpo":
        report = exporter.export_dpo(
            output,
            preferences=preferences,
            pairing=pairing,
            min_margin=min_margin,
            max_pairs_per_task=max_pairs_per_task,
        )
    else:
        report = exporter.export_grpo(output, min_group_size=min_group_size)
    click.echo(f"{fmt}: wrote {report.written} records to {output}; {report.left_out()}", err=True)


@cli.command("dedup")
@trajectory_files
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Unique trajectories to write.")
@click.option("--store", help="Content-addressed store folder to add the unique trajectories to.")
def dedup_command(trajectories: tuple[str, ...], more_files: tuple[str, ...], output: str, store: str | None) -> None:
    """Drop duplicate episodes (content hash); optionally keep a CAS store."""
    from trajectoryhub.dedup import ContentStore, dedup

    items = _read_all(_files(trajectories, more_files))
    unique = list(dedup(items))
    write_trajectories(output, unique)
    if store:
        cas = ContentStore(store)
        new = sum(cas.put(t)[1] for t in unique)
        click.echo(f"store {store}: {new} new, {len(cas)} total", err=True)
    click.echo(f"{len(items)} trajectories, {len(unique)} unique -> {output}", err=True)


@cli.command("prm-data")
@trajectory_files
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="PRM records JSONL to write.")
@click.option("--env", help="Environment id (default: the tasks' suite's, else the one of their domain).")
@click.option(
    "-k",
    "--continuations",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Continuations per step (the expert is deterministic: 1 is exact).",
)
@click.option("--max-steps", type=click.IntRange(min=1), help="Steps per continuation (default: the suite's + 10).")
@click.option(
    "--labels",
    type=click.Choice(["outcome", "expert"]),
    default="expert",
    show_default=True,
    help="outcome: every step gets its run's own outcome (no replay, any environment); "
    "expert: the task's expert plays on from each step (-k, --env, --max-steps).",
)
def prm_data_command(
    trajectories: tuple[str, ...],
    more_files: tuple[str, ...],
    output: str,
    env: str | None,
    continuations: int,
    max_steps: int | None,
    labels: str,
) -> None:
    """Label every step of recorded runs for a learned process reward model.

    With --labels expert (the default) a step's label is the chance the task still succeeds after
    it: the environment is put back in the state the step left (the recorded calls replayed) and
    the task's expert plays on from there (its metadata.solution); the last step's label is the
    run's outcome. With --labels outcome every step gets its run's outcome: what followed the step
    in the run is one continuation by the policy that made it. One PRMRecord per step
    ({text, label, task_id, trajectory_id, step, group}), for `knowlyr-trainer prm`.
    """
    from trajectoryhub.prm_data import LabelStats, outcome_values, prm_records, step_values

    def needs_solution(trajectory: Any) -> tuple[str, str] | None:
        solution = trajectory.task.metadata.get("solution")
        if not isinstance(solution, list) or not solution:
            return "task.metadata.solution", "missing: the expert continuation replays the task's solution"
        return None

    runs = _read_all(_files(trajectories, more_files), check=needs_solution if labels == "expert" else None)
    records = [run.model_dump(mode="json") for run in runs]
    if labels == "outcome":
        labelled = outcome_values(records)
    else:
        tasks = [run.task for run in runs]
        suite = _suite_of(tasks, env_given=env is not None)
        env_id = env or (suite.env_id if suite else _env_for_domain(tasks))
        env_kwargs = dict(suite.env_kwargs or {}) if suite and not env else {}
        budget = max_steps or ((suite.max_steps if suite else 30) + 10)
        labelled = step_values(
            records, env=env_id, env_kwargs=env_kwargs, k=continuations, max_steps=budget, progress=True
        )
    stats = LabelStats()
    written = write_jsonl(output, (r.model_dump(mode="json") for r in prm_records(labelled, stats)))
    click.echo(
        f"{stats.runs} runs, {written} labelled steps ({stats.by_value.get('1.0', 0)} at 1, "
        f"{stats.by_value.get('0.0', 0)} at 0; {stats.unreplayable} runs not replayable: final step only) -> {output}",
        err=True,
    )


def _load_runs(paths: list[str]) -> dict[str, list]:
    runs: dict[str, list] = {}
    for path in paths:
        items = _read_all([path])
        name = (items[0].agent if items and items[0].agent else "") or Path(path).stem
        if name in runs:
            name = Path(path).stem
        runs[name] = items
    return runs


@cli.command("evaluate")
@click.option("-t", "--trajectories", multiple=True, help="Summarise a recorded run (repeatable).")
@click.option(
    "--policy",
    help="'expert', a local checkpoint or alias (smollm2-135m), or an http(s) endpoint (OpenAI-compatible or Anthropic).",
)
@click.option("--tasks", type=click.Path(dir_okay=False), help="JSONL of tasks, e.g. from `knowlyr-hub tasks`.")
@click.option("--env", help="Environment id (default: the tasks' suite's, else the one of their domain).")
@click.option(
    "--env-kwargs",
    metavar="JSON",
    help="Keyword arguments of the environment, a JSON object, e.g. knowlyr/mcp's "
    '\'{"server": "mcp-server-git --repository {workspace}"}\' (default: the suite\'s).',
)
@click.option(
    "--max-steps", type=click.IntRange(min=1), help="Step budget per episode (default: the suite's, else 30)."
)
@click.option(
    "--batch-size", type=click.IntRange(min=1), default=64, show_default=True, help="Episodes played in lockstep."
)
@click.option("--name", help="Stage name in the summary and report (default: the model's).")
@click.option("--split", help="Split label (default: the tasks' metadata.split).")
@click.option("--model", help="Endpoint policies: the served model name.")
@click.option("--api-key")
@click.option("--system-prompt", help="Default: a checkpoint's prompt contract, else the suite's.")
@click.option(
    "--include-tools/--no-include-tools",
    default=None,
    help="Show the tool schemas in the prompt (default: a checkpoint's prompt contract, else yes).",
)
@click.option(
    "--max-new-tokens",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    help="Model policies: tokens per answer.",
)
@click.option("--seed", type=int, help="Episode i is reset with seed + i (and sampling is seeded with it).")
@click.option(
    "--samples",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Episodes per task; above 1 the summary gives pass@1 and pass@k (k = samples).",
)
@click.option(
    "--temperature",
    type=click.FloatRange(min=0, max=2),
    help="Model policies' sampling temperature (default 0 = greedy; 1 with --samples above 1).",
)
@click.option(
    "--dtype",
    type=click.Choice(["float32", "bfloat16"]),
    default="float32",
    show_default=True,
    help="Local checkpoints: weights' dtype for generation (bfloat16: ~2x faster on CPUs with AMX or "
    "AVX512-BF16, many times slower on CPUs without native bf16).",
)
@executor_options(
    "batched", "Play episodes in lockstep here, or on Ray actors (extra: ray; not for local model policies)."
)
@click.option(
    "--concurrency", type=click.IntRange(min=1), default=2, show_default=True, help="Ray actors (with --executor ray)."
)
@click.option("--report-dir", help="Write report.json, report.md, report.html and PNG plots here.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the trajectories here.")
def evaluate_command(trajectories: tuple[str, ...], **options: Any) -> None:
    """Run a policy on tasks (or summarise recorded runs): success, CI, metrics."""
    if bool(trajectories) == (options["policy"] is not None):
        raise click.UsageError("give either --policy (with --tasks) or -t recorded runs")
    if options["policy"] is not None:
        _evaluate_policy(SimpleNamespace(**options))
        return
    from trajectoryhub.evaluate import evaluate_agent

    for name, items in _load_runs(list(trajectories)).items():
        click.echo(json.dumps(evaluate_agent(items, agent=name).to_dict()))


def _suite_of(tasks: list[TaskInfo], *, env_given: bool) -> Any:
    """The task suite every task names in ``metadata["suite"]``, or None when they name none."""
    names = {t.metadata.get("suite") for t in tasks}
    if names == {None}:
        return None
    if len(names) > 1:
        found = ", ".join(sorted(str(n) for n in names))
        raise InputError(f"the tasks come from several suites ({found}): evaluate one suite at a time")
    (name,) = names
    try:
        from agentsandbox.suites import get_suite
    except ImportError as exc:
        if env_given:
            return None
        raise MissingExtraError(f"the tasks' suite {name!r}", "knowlyr-hub", "sandbox", hint="or pass --env") from exc
    return get_suite(name)


def _env_for_domain(tasks: list[TaskInfo]) -> str:
    from knowlyrcore import list_envs

    domains = sorted({t.domain for t in tasks})
    candidates = list_envs(domain=domains[0]) if len(domains) == 1 else []
    if len(candidates) != 1:
        found = ", ".join(candidates) or "none"
        raise InputError(
            f"cannot tell which environment runs tasks of domain {', '.join(domains)} "
            f"(registered for it: {found}): pass --env"
        )
    return candidates[0]


def _env_kwargs(text: str) -> dict[str, Any]:
    """``--env-kwargs``: a JSON object, else a one-line usage error."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON ({exc})", param_hint="--env-kwargs") from None
    if not isinstance(value, dict):
        raise click.BadParameter(f"a JSON object is needed, got {type(value).__name__}", param_hint="--env-kwargs")
    return value


def _tool_specs(env_id: str, env_kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    """OpenAI tool schemas of the environment's tools (from its domain profile when it has them),
    as built: the rollout loops hand a policy an episode's own tools when they differ (per task)."""
    from knowlyrcore import make, tool_schemas

    with make(env_id, **env_kwargs) as env:
        return tool_schemas(list(env.available_tools), env.domain)


def _policy(args: Any, suite: Any, env_id: str, env_kwargs: dict[str, Any]) -> tuple[Any, str]:
    """The policy (a BatchPolicy or a per-episode factory) that ``--policy`` names, and its model name."""
    temperature = args.temperature if args.temperature is not None else (1.0 if args.samples > 1 else 0.0)
    if args.policy == "expert":
        from trajectoryhub.evaluate import ExpertReplay

        return (suite.expert if suite is not None else ExpertReplay), "expert"
    tools = _tool_specs(env_id, env_kwargs)
    if args.policy.startswith(("http://", "https://")):  # a served model: no trainer needed
        if not args.model:
            raise click.UsageError("an endpoint policy needs --model, the name the server serves the model under")
        system_prompt = args.system_prompt or (getattr(suite, "system_prompt", "") if suite is not None else "") or None
        from knowlyrcore.endpoint import EndpointPolicy

        def factory() -> EndpointPolicy:
            return EndpointPolicy(
                args.policy,
                args.model,
                api_key=args.api_key,
                system_prompt=system_prompt,
                tools=None if args.include_tools is False else tools,
                include_tools=args.include_tools is not False,
                max_tokens=args.max_new_tokens,
                temperature=temperature,
            )

        return factory, args.model
    try:  # the trainer's one door for hub (packages/hub/tests/test_layering.py)
        from agenttrainer.acting import policy_from_spec
    except ImportError as exc:
        raise MissingExtraError(
            f"--policy {args.policy!r} (a local checkpoint or model alias)",
            "knowlyr-hub",
            "trainer",
            hint="or pass an http(s) endpoint or 'expert'",
        ) from exc
    policy = policy_from_spec(
        args.policy,
        system_prompt=args.system_prompt,  # else a checkpoint's prompt contract, else each task's own
        tools=tools,
        include_tools=args.include_tools,
        max_new_tokens=args.max_new_tokens,
        temperature=temperature,
        dtype=args.dtype,
        announce=lambda line: click.echo(f"{line}; --system-prompt / --include-tools override it", err=True),
    )
    return policy, args.model or args.policy.rstrip("/")


def _seed_sampling(seed: int) -> None:
    """Seed the samplers a local model policy draws from, so a sampled evaluation repeats."""
    import random

    random.seed(seed)
    try:
        import torch
    except ImportError:  # endpoint and expert policies sample elsewhere, or not at all
        return
    torch.manual_seed(seed)


def _print_table(header: list[str], rows: list[list[str]]) -> None:
    header, rows = [shown(cell) for cell in header], [[shown(cell) for cell in row] for row in rows]
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    for row in [header, *rows]:
        click.echo(
            "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
        )


def _evaluate_policy(args: Any) -> None:
    from trajectoryhub.evaluate import evaluate_policy
    from trajectoryhub.report import stage_table

    if not args.tasks:
        raise click.UsageError("--policy needs --tasks, a JSONL file of tasks (see `knowlyr-hub tasks`)")
    if args.report_dir:
        from trajectoryhub.report import require_matplotlib

        require_matplotlib()  # fail before the evaluation, not after it
    tasks = list(read_jsonl(args.tasks, TaskInfo))
    if not tasks:
        raise DataFormatError(args.tasks, None, "no tasks (empty file)")
    suite = _suite_of(tasks, env_given=args.env is not None)
    env_id = args.env or (suite.env_id if suite is not None else _env_for_domain(tasks))
    from_suite = suite is not None and suite.env_id == env_id  # the suite's settings are for its own env
    env_kwargs = _env_kwargs(args.env_kwargs) if args.env_kwargs else dict(suite.env_kwargs) if from_suite else {}
    max_steps = args.max_steps or (suite.max_steps if from_suite else 30)
    splits = {str(t.metadata.get("split", "")) for t in tasks}
    split = args.split or (splits.pop() if len(splits) == 1 else "")
    policy, model_name = _policy(args, suite, env_id, env_kwargs)
    name = args.name or model_name
    started = time.perf_counter()
    if args.samples > 1 or args.seed is not None:
        _seed_sampling(args.seed or 0)
    summary, trajectories = evaluate_policy(
        policy,
        [t for t in tasks for _ in range(args.samples)],
        env=env_id,
        name=name,
        split=split,
        max_steps=max_steps,
        env_kwargs=env_kwargs,
        batch_size=args.batch_size,
        seed=args.seed,
        model_name=model_name,
        progress=True,
        executor=args.executor,
        ray_address=args.address,
        concurrency=args.concurrency,
    )
    seconds = time.perf_counter() - started
    _print_table(*stage_table([summary]))
    if args.samples > 1:
        from trajectoryhub.evaluate import summarize_samples

        sampled = summarize_samples(trajectories, name=name, split=split, k=args.samples)
        summary["sampled"] = {k: v for k, v in sampled.items() if k != "per_task"}
        click.echo(
            f"pass@1 {sampled['pass@1']:.1%}  pass@{args.samples} {sampled['pass@k']:.1%}  "
            f"({sampled['n_tasks']} tasks x {args.samples} samples)"
        )
    click.echo(f"{summary['n']} episodes on {env_id} in {seconds:.1f}s", err=True)
    if summary.get("env_errors"):
        click.echo(
            f"{summary['env_errors']} episode(s) ended because the environment raised on the policy's "
            "action (counted as failures; see metadata.env_error)",
            err=True,
        )
    if summary.get("infrastructure_failures"):
        click.echo(
            f"{summary['infrastructure_failures']} episode(s) failed for infrastructure reasons "
            "(counted as failures; see metadata.infrastructure_failure)",
            err=True,
        )
    if args.output:
        write_trajectories(args.output, trajectories)
        click.echo(f"trajectories -> {args.output}", err=True)
    if args.report_dir:
        from trajectoryhub.report import write_report

        report = {
            "stages": [summary],
            "comparisons": [],
            "seconds": seconds,
            "policy": args.policy,
            "env": env_id,
            "tasks": str(args.tasks),
            "max_steps": max_steps,
        }
        written = write_report(report, args.report_dir, trajectories_by_stage={name: trajectories})
        click.echo(f"report -> {written['html']}", err=True)


class TasksGroup(HubGroup):
    """``tasks SUITE ...`` runs the ``suite`` command (as it did before ``tasks`` had subcommands);
    ``tasks mcp ...`` and ``tasks suite ...`` run theirs; ``tasks --help`` lists both."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = ["suite", *args]
        return super().parse_args(ctx, args)


@cli.group("tasks", cls=TasksGroup)
def tasks_group() -> None:
    """Write tasks as JSONL: a task suite's (`tasks SUITE ...`, `tasks --list`), or tasks a model
    writes for any MCP server (`tasks mcp --server CMD --generator-url URL ...`)."""


@tasks_group.command("suite")
@click.argument("suite", required=False)
@click.option("--list", "list_suites_", is_flag=True, help="List the installed suites.")
@click.option(
    "--split",
    default="test",
    show_default=True,
    help="train, test or test-unseen; for a suite whose templates have roles (retail) also "
    "train-verifier-only and test-verifier-only (templates checked but never demonstrated).",
)
@click.option("-n", "--n", type=click.IntRange(min=1), default=100, show_default=True, help="How many tasks.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Tasks JSONL to write.")
def tasks_command(suite: str | None, list_suites_: bool, split: str, n: int, seed: int, output: str | None) -> None:
    """Write a task suite's tasks as JSONL (--list: the installed suites); `tasks SUITE` is short for
    `tasks suite SUITE`."""
    try:
        from agentsandbox.suites import SuiteError, get_suite, list_suites
    except ImportError:
        raise MissingExtraError("knowlyr-hub tasks", "knowlyr-hub", "sandbox") from None
    if list_suites_:
        for name in list_suites():
            try:
                found = get_suite(name)
            except (ImportError, SuiteError) as exc:  # one broken plugin must not hide the others
                click.echo(f"{name}\t?\tcannot load: {exc}")
                continue
            click.echo(f"{name}\t{found.env_id}\t{found.description}")
        return
    if not suite or not output:
        raise click.UsageError("tasks needs a SUITE and -o FILE (or --list)")
    try:
        chosen = get_suite(suite)
        tasks = chosen.generate(split, n, seed)
    except SuiteError as exc:
        raise click.UsageError(str(exc)) from None
    for task in tasks:  # evaluate finds the suite (env, step budget, expert) from here
        task.setdefault("metadata", {}).setdefault("suite", suite)
        task["metadata"].setdefault("split", split)
        if chosen.system_prompt:  # what a model policy is told (knowlyr-trainer grpo --online reads it)
            task["metadata"].setdefault("system_prompt", chosen.system_prompt)
    write_jsonl(output, tasks)
    click.echo(f"{len(tasks)} {suite} tasks ({split}, seed {seed}) -> {output}", err=True)


@tasks_group.command("mcp")
@click.option(
    "--server",
    metavar="CMD",
    help="The MCP server's command line, e.g. 'mcp-server-time' (a bare name is looked up on PATH, then in "
    "$KNOWLYR_MCP_PATH).",
)
@click.option("--url", metavar="URL", help="A running MCP server over streamable HTTP instead of --server.")
@click.option(
    "--generator-url",
    metavar="URL",
    required=True,
    help="Base URL of the model that writes the tasks: OpenAI-compatible (http://127.0.0.1:8000/v1) or Anthropic.",
)
@click.option(
    "--generator-model",
    metavar="NAME",
    default="default",
    show_default=True,
    help="The model name the endpoint serves.",
)
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the generator's API key.")
@click.option("-n", "--n", type=click.IntRange(min=1), default=20, show_default=True, help="How many tasks.")
@click.option("--seed", type=int, default=0, show_default=True, help="Picks the tools each batch favours.")
@click.option("--instructions", metavar="TEXT", help="What the tasks should be about, in your words.")
@click.option(
    "--workspace-copy",
    metavar="PATH",
    type=click.Path(exists=True, file_okay=False),
    help="A directory (a repository, a database folder) copied fresh for every episode: recorded in each task "
    "and its files shown to the generator.",
)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Tasks JSONL to write.")
@click.option(
    "--sandbox",
    type=click.Choice(["auto", "bwrap", "none"]),
    default="auto",
    show_default=True,
    help="Run the server in bubblewrap (auto: where it works) while its tools are listed.",
)
def tasks_mcp_command(
    server: str | None,
    url: str | None,
    generator_url: str,
    generator_model: str,
    api_key_env: str | None,
    n: int,
    seed: int,
    instructions: str | None,
    workspace_copy: str | None,
    output: str,
    sandbox: str,
) -> None:
    """Write tasks for any MCP server: list its tools, and ask a model to write requests and rubrics.

    Each task is a knowlyr/mcp task (metadata.template "generated") with a rubric for the judge and,
    where the generator is sure of them, facts the answer must contain. Every proposal is checked
    (types, lengths, tools that exist, no duplicates); the refused ones are counted on stderr. With no
    valid proposal at all, nothing is written (exit 2).

    \b
    knowlyr-hub tasks mcp --server mcp-server-time --generator-url http://127.0.0.1:8000/v1 \\
        --generator-model my-model -n 20 -o time-tasks.jsonl
    """
    import os

    from trajectoryhub.mcp_tasks import TaskGenerator, generate_tasks, list_tools

    if (server is None) == (url is None):
        raise click.UsageError("tasks mcp needs exactly one of --server CMD and --url URL")
    api_key = None
    if api_key_env:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise click.UsageError(f"--api-key-env {api_key_env}: the variable is not set")
    tools = list_tools(server=server, url=url, sandbox=sandbox)
    click.echo(f"{len(tools)} tools on {server or url}: {', '.join(shown(t['name']) for t in tools)}", err=True)
    result = generate_tasks(
        TaskGenerator(generator_url, generator_model, api_key=api_key),
        tools,
        n,
        server=server,
        url=url,
        seed=seed,
        instructions=instructions,
        workspace_copy=workspace_copy,
        progress=lambda line: click.echo(line, err=True),
    )
    write_jsonl(output, result.tasks)
    short = f" (only {len(result.tasks)} of {n} in {result.attempts} attempts)" if len(result.tasks) < n else ""
    click.echo(f"{len(result.tasks)} tasks{short} -> {output}; dropped proposals: {result.dropped_summary()}", err=True)


@cli.command("compare")
@click.option("-t", "--trajectories", required=True, multiple=True, help="One agent's run (repeat).")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def compare_command(trajectories: tuple[str, ...], alpha: float, as_json: bool) -> None:
    """Compare agents with significance tests and a leaderboard."""
    from trajectoryhub.evaluate import compare_agents

    result = compare_agents(_load_runs(list(trajectories)), alpha=alpha)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"{'rank':>4}  {'agent':24} {'reward':>8} {'success':>8} {'n':>5}")
    for row in result["leaderboard"]:
        success = "-" if row["success_rate"] is None else f"{row['success_rate']:.1%}"
        mark = " *" if row["beats_next"] else ""
        click.echo(
            f"{row['rank']:>4}  {shown(row['agent']):24} {row['avg_reward']:8.3f} {success:>8} "
            f"{row['episodes']:>5}{mark}"
        )
    for c in result["comparisons"]:
        click.echo(
            f"{shown(c['a'])} vs {shown(c['b'])}: diff {c['diff']:+.3f}, "
            f"Welch p={c['welch_p_bonferroni']:.3g}, "
            f"Mann-Whitney p={c['mannwhitney_p_bonferroni']:.3g} (Bonferroni)"
        )
    click.echo("* lead over the next agent is significant (Welch, Bonferroni-corrected)")


@cli.command("pipeline")
@click.argument("inputs", nargs=-1, required=True)
@click.option(
    "-o",
    "--output-dir",
    required=True,
    help="Each run writes a new run-<time>-<id>/ here; latest/ points to the newest.",
)
@click.option("--domain", help="Rubric weights of this domain (default: each task's domain).")
@click.option("--log-format", default="auto", show_default=True, help="A knowlyr-recorder format name, or auto.")
@click.option(
    "--formats",
    default="sft,dpo,grpo",
    show_default=True,
    callback=lambda c, p, v: _formats(v),
    help="Datasets to export, comma-separated: sft, dpo, grpo.",
)
@click.option("--min-margin", type=click.FloatRange(min=0), default=DEFAULT_MIN_MARGIN, show_default=True)
@click.option(
    "--include-failures",
    is_flag=True,
    help="SFT: keep failed and unjudged trajectories too (default: successful ones only).",
)
@click.option(
    "--skip-invalid",
    is_flag=True,
    help="Report bad files and records (file:line) and keep the good ones; default: stop at the first.",
)
def pipeline_command(
    inputs: tuple[str, ...],
    output_dir: str,
    domain: str | None,
    log_format: str,
    formats: tuple[str, ...],
    min_margin: float,
    include_failures: bool,
    skip_invalid: bool,
) -> None:
    """Agent logs -> trajectories -> scored -> deduplicated -> SFT/DPO/GRPO (INPUTS: log or
    trajectory files, folders or globs)."""
    from dataclasses import asdict

    from trajectoryhub.pipeline import Pipeline

    pipeline = Pipeline(
        domain=domain,
        log_format=log_format,
        skip_invalid=skip_invalid,
        formats=formats,
        min_margin=min_margin,
        include_failures=include_failures,
    )
    report = pipeline.run(list(inputs), output_dir)
    for error in report.errors:
        click.echo(f"warning: skipped {error}", err=True)
    click.echo(json.dumps(asdict(report), indent=2))
    click.echo(
        f"{report.trajectories} trajectories -> {report.run_dir} (also {Path(output_dir) / 'latest'})"
        + (f"; {len(report.errors)} bad record(s) skipped" if report.errors else ""),
        err=True,
    )


def _formats(value: str) -> tuple[str, ...]:
    chosen = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = sorted(set(chosen) - {"sft", "dpo", "grpo"})
    if unknown or not chosen:
        raise click.BadParameter(f"expected a comma-separated list of sft, dpo, grpo; got {value!r}")
    return chosen


@cli.command("collect")
@click.argument("env_id")
@click.option(
    "--endpoint",
    required=True,
    help="Base URL: OpenAI-compatible (http://127.0.0.1:8000/v1) or Anthropic (https://api.anthropic.com/v1).",
)
@click.option("--model", required=True)
@click.option("--api-key")
@click.option("--tasks", type=click.Path(dir_okay=False), help="JSONL of tasks (cycled over the episodes).")
@click.option("-n", "--n-episodes", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--max-steps", type=click.IntRange(min=1), default=30, show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--system-prompt")
@click.option("--agent-name")
@click.option("--reward-domain", help="Score steps with knowlyr-reward's rules for this domain.")
@executor_options("thread", "Run episodes in threads, or as Ray actors (extra: ray).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
def collect_command(**options: Any) -> None:
    """Roll out a policy served at an endpoint (OpenAI-compatible or Anthropic) in an environment."""
    args = SimpleNamespace(**options)
    from knowlyrcore.endpoint import EndpointPolicy
    from trajectoryhub.rollout import collect

    tasks = list(read_jsonl(args.tasks, TaskInfo)) if args.tasks else None
    if tasks == []:
        raise DataFormatError(args.tasks, None, "no tasks (empty file)")
    reward_fn = None
    if args.reward_domain:
        from trajectoryhub.rewards import make_reward_fn

        reward_fn = make_reward_fn(args.reward_domain)
    trajectories = collect(
        args.env_id,
        agent_factory=lambda: EndpointPolicy(
            args.endpoint, args.model, api_key=args.api_key, system_prompt=args.system_prompt
        ),
        n_episodes=args.n_episodes,
        tasks=tasks,
        max_steps=args.max_steps,
        reward_fn=reward_fn,
        concurrency=args.concurrency,
        agent_name=args.agent_name or args.model,
        model_name=args.model,
        output_path=args.output,
        executor=args.executor,
        ray_address=args.address,
    )
    click.echo(f"collected {len(trajectories)} trajectories -> {args.output}", err=True)


@cli.group("store", cls=HubGroup)
def store_group() -> None:
    """A trajectory database (SQLite by default, or PostgreSQL) with GDI ranking.

    --db (or KNOWLYR_STORE): a file path for SQLite, or postgresql://user@host:port/db. Only
    `store add` creates a store; the other commands refuse one that is not there."""


def store_options(fn: Any) -> Any:
    fn = click.option(
        "--gdi-weights", help="GDI weights, e.g. intrinsic=0.35,utility=0.3,feedback=0.2,freshness=0.15."
    )(fn)
    return click.option(
        "--db",
        envvar="KNOWLYR_STORE",
        default="trajectories.db",
        show_default=True,
        help="SQLite file or postgresql:// URL (env KNOWLYR_STORE).",
    )(fn)


def query_options(fn: Any) -> Any:
    options = [
        click.option("--task", help="Only this task id."),
        click.option("--domain", help="Only this domain."),
        click.option("--agent", help="Only this agent."),
        click.option("--success/--failure", default=None, help="Only successful (or failed) episodes."),
        click.option("--min-reward", type=float),
        click.option("--max-reward", type=float),
        click.option("--since", type=float, help="Stored at or after this unix time."),
        click.option("--until", type=float, help="Stored at or before this unix time."),
        click.option(
            "--order", "order_by", type=click.Choice(["gdi", "reward", "time"]), default="gdi", show_default=True
        ),
        click.option("--limit", type=click.IntRange(min=1)),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _open_store(db: str, gdi_weights: str | None, *, create: bool = False):
    """The store at ``db``; only ``store add`` passes ``create``: reading (or rating) a store that
    is not there is one line saying where to find one, and makes no file."""
    from trajectoryhub.store import GDIWeights, NoStoreError, TrajectoryStore

    weights = GDIWeights.parse(gdi_weights) if gdi_weights else None
    try:
        return TrajectoryStore(db, weights=weights, create=create)
    except NoStoreError as exc:
        raise InputError(
            f"{exc}; pass --db (or set KNOWLYR_STORE) to the store `store add` wrote, "
            f"or run `knowlyr-hub store add FILE --db {exc.where}` first"
        ) from None


@store_group.command("add")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=True))
@store_options
def store_add_command(files: tuple[str, ...], db: str, gdi_weights: str | None) -> None:
    """Add trajectory JSONL files (or folders) to the store; duplicates are skipped. A bad record
    (including text a store cannot hold: NUL in an id, agent or model, a lone surrogate) is
    refused as file:line: field, and nothing is stored."""
    from trajectoryhub.store import text_problem

    items = _read_all(list(files), check=text_problem)
    with _open_store(db, gdi_weights, create=True) as store:
        report = store.add(items)
        total = len(store)
    click.echo(f"{db}: {report.added} new, {report.duplicates} already stored, {total} in the store", err=True)


@store_group.command("list")
@store_options
@query_options
def store_list_command(db: str, gdi_weights: str | None, **query: Any) -> None:
    """List stored trajectories, best first."""
    with _open_store(db, gdi_weights) as store:
        rows = store.query(**query)
    click.echo(f"{'hash':12} {'gdi':>6} {'reward':>7} {'ok':>3} {'exp':>4}  {'agent':16} task")
    for r in rows:
        t = r.trajectory
        ok = "-" if t.outcome is None else "yes" if t.outcome.success else "no"
        reward = "-" if r.reward is None else f"{r.reward:.3f}"
        agent = shown(t.agent or "-")[:16]
        click.echo(f"{r.hash[:12]} {r.gdi:6.3f} {reward:>7} {ok:>3} {r.exports:4d}  {agent:16} {shown(t.task.id)}")


@store_group.command("export")
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    help="File to write: .parquet for Parquet, anything else trajectory JSONL.",
)
@store_options
@query_options
def store_export_command(output: str, db: str, gdi_weights: str | None, **query: Any) -> None:
    """Export matching trajectories (best first) and count the export toward their GDI."""
    with _open_store(db, gdi_weights) as store:
        write = store.export_parquet if output.endswith(".parquet") else store.export_jsonl
        count = write(output, **query)
    click.echo(f"exported {count} trajectories -> {output}", err=True)


@store_group.command("stats")
@store_options
def store_stats_command(db: str, gdi_weights: str | None) -> None:
    """Counts by domain and agent, success rate, mean reward, exports (JSON)."""
    with _open_store(db, gdi_weights) as store:
        click.echo(json.dumps(store.stats(), indent=2))


@store_group.command("feedback")
@click.argument("hash_", metavar="HASH")
@click.argument("value", type=click.FloatRange(0, 1))
@store_options
def store_feedback_command(hash_: str, value: float, db: str, gdi_weights: str | None) -> None:
    """Record the training effect of a trajectory (0 harmful .. 1 helpful; GDI feedback).

    HASH: the trajectory's hash as `store list` prints it (12 characters), or any prefix of it
    of at least 8 hex digits that no other stored trajectory shares, or the whole hash."""
    with _open_store(db, gdi_weights) as store:
        full = store.mark_feedback(hash_, value)
    click.echo(f"feedback {value} -> {full[:12]}", err=True)


cli.add_command(mcp_command("knowlyr-hub", "trajectoryhub.mcp_server"))


def main(argv: Sequence[str] | None = None) -> int:
    return run(cli, argv, prog_name="knowlyr-hub")


if __name__ == "__main__":
    raise SystemExit(main())
