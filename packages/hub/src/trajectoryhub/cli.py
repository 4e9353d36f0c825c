"""The ``knowlyr-hub`` command.

knowlyr-hub export --format sft  -t trajectories.jsonl -o sft_train.jsonl
knowlyr-hub export --format dpo  -t trajectories.jsonl [-p preferences.jsonl] -o dpo_train.jsonl
knowlyr-hub export --format grpo -t trajectories.jsonl -o grpo_train.jsonl
knowlyr-hub dedup -t trajectories.jsonl -o unique.jsonl [--store cas/]
knowlyr-hub evaluate -t run.jsonl
knowlyr-hub compare -t agent_a.jsonl -t agent_b.jsonl
knowlyr-hub collect ENV_ID --endpoint URL --model NAME -n 20 -o trajectories.jsonl
knowlyr-hub tasks --list
knowlyr-hub tasks retail --split test --n 50 --seed 0 -o tasks.jsonl
knowlyr-hub evaluate --policy expert|smollm2-135m|./checkpoint|http://host/v1 --tasks tasks.jsonl \
    [--env ENV_ID] [--max-steps N] [--name NAME] [--report-dir DIR] [-o trajectories.jsonl]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from knowlyrcore import KnowlyrError, TaskInfo, read_jsonl, read_trajectories, write_jsonl, write_trajectories
from knowlyrcore.errors import DataFormatError


def _read_all(paths: list[str]) -> list:
    """Trajectories of every file (folders: their *.jsonl); an input without any is an error."""
    items: list = []
    for given in paths:
        files = sorted(Path(given).glob("*.jsonl")) if Path(given).is_dir() else [Path(given)]
        if not files:
            raise DataFormatError(given, None, "folder holds no .jsonl files")
        for path in files:
            found = list(read_trajectories(path))
            if not found:
                raise DataFormatError(str(path), None, "no trajectories (empty file)")
            items.extend(found)
    return items


def _cmd_export(args: argparse.Namespace) -> int:
    from trajectoryhub.export import DatasetExporter

    exporter = DatasetExporter(trajectories=_read_all(args.trajectories))
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

    items = _read_all(args.trajectories)
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
        items = _read_all([path])
        name = (items[0].agent if items and items[0].agent else "") or Path(path).stem
        if name in runs:
            name = Path(path).stem
        runs[name] = items
    return runs


def _cmd_evaluate(args: argparse.Namespace) -> int:
    if args.policy is not None:
        return _evaluate_policy(args)
    from trajectoryhub.evaluate import evaluate_agent

    for name, items in _load_runs(args.trajectories).items():
        print(json.dumps(evaluate_agent(items, agent=name).to_dict()))
    return 0


def _suite_of(tasks: list[TaskInfo], *, env_given: bool) -> Any:
    """The task suite every task names in ``metadata["suite"]``, or None when they name none."""
    names = {t.metadata.get("suite") for t in tasks}
    if names == {None}:
        return None
    if len(names) > 1:
        found = ", ".join(sorted(str(n) for n in names))
        raise ValueError(f"the tasks come from several suites ({found}): evaluate one suite at a time")
    (name,) = names
    try:
        from agentsandbox.suites import get_suite
    except ImportError as exc:
        if env_given:
            return None
        raise ImportError(f"the tasks come from suite {name!r}, which needs knowlyr-sandbox: "
                          "pip install 'knowlyr-hub[sandbox]' (or pass --env)") from exc  # fmt: skip
    return get_suite(name)


def _env_for_domain(tasks: list[TaskInfo]) -> str:
    from knowlyrcore import list_envs

    domains = sorted({t.domain for t in tasks})
    candidates = list_envs(domain=domains[0]) if len(domains) == 1 else []
    if len(candidates) != 1:
        found = ", ".join(candidates) or "none"
        raise ValueError(f"cannot tell which environment runs tasks of domain {', '.join(domains)} "
                         f"(registered for it: {found}): pass --env")  # fmt: skip
    return candidates[0]


def _tool_specs(env_id: str, env_kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    """OpenAI tool schemas of the environment's tools (from its domain profile when it has them)."""
    from knowlyrcore import make, tool_schemas

    with make(env_id, **env_kwargs) as env:
        return tool_schemas(list(env.available_tools), env.domain)


def _policy(args: argparse.Namespace, suite: Any, env_id: str, env_kwargs: dict[str, Any]) -> tuple[Any, str]:
    """The policy (a BatchPolicy or a per-episode factory) that ``--policy`` names, and its model name."""
    if args.policy == "expert":
        from trajectoryhub.evaluate import ExpertReplay

        return (suite.expert if suite is not None else ExpertReplay), "expert"
    system_prompt = args.system_prompt or (getattr(suite, "system_prompt", "") if suite is not None else "") or None
    tools = _tool_specs(env_id, env_kwargs)
    if args.policy.startswith(("http://", "https://")):
        if not args.model:
            raise ValueError("an endpoint policy needs --model, the name the server serves the model under")
        from trajectoryhub.policy import OpenAIPolicy

        def factory() -> OpenAIPolicy:
            return OpenAIPolicy(args.model, base_url=args.policy, api_key=args.api_key, system_prompt=system_prompt,
                                tools=tools, max_tokens=args.max_new_tokens)  # fmt: skip

        return factory, args.model
    try:
        from agenttrainer.batch_policy import LocalBatchPolicy
        from agenttrainer.models.errors import ModelLoadError
    except ImportError as exc:
        raise ImportError(f"--policy {args.policy!r} names a local checkpoint or alias, which needs knowlyr-trainer "
                          f"({exc}); or pass an http(s) endpoint or 'expert'") from exc  # fmt: skip
    try:
        policy = LocalBatchPolicy.from_pretrained(args.policy, system_prompt=system_prompt, tools=tools,
                                                  max_new_tokens=args.max_new_tokens)  # fmt: skip
    except ModelLoadError as exc:
        raise ValueError(f"--policy {args.policy!r}: {exc}") from exc
    return policy, args.model or args.policy.rstrip("/")


def _print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))))


def _evaluate_policy(args: argparse.Namespace) -> int:
    from trajectoryhub.evaluate import evaluate_policy
    from trajectoryhub.report import stage_table

    if not args.tasks:
        raise ValueError("--policy needs --tasks, a JSONL file of tasks (see `knowlyr-hub tasks`)")
    if args.report_dir:
        from trajectoryhub.report import require_matplotlib

        require_matplotlib()  # fail before the evaluation, not after it
    tasks = list(read_jsonl(args.tasks, TaskInfo))
    if not tasks:
        raise ValueError(f"{args.tasks}: no tasks")
    suite = _suite_of(tasks, env_given=args.env is not None)
    env_id = args.env or (suite.env_id if suite is not None else _env_for_domain(tasks))
    from_suite = suite is not None and suite.env_id == env_id  # the suite's settings are for its own env
    env_kwargs = dict(suite.env_kwargs) if from_suite else {}
    max_steps = args.max_steps or (suite.max_steps if from_suite else 30)
    splits = {str(t.metadata.get("split", "")) for t in tasks}
    split = args.split or (splits.pop() if len(splits) == 1 else "")
    policy, model_name = _policy(args, suite, env_id, env_kwargs)
    name = args.name or model_name
    started = time.perf_counter()
    summary, trajectories = evaluate_policy(
        policy, tasks, env=env_id, name=name, split=split, max_steps=max_steps, env_kwargs=env_kwargs,
        batch_size=args.batch_size, seed=args.seed, model_name=model_name, progress=True,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    _print_table(*stage_table([summary]))
    print(f"{summary['n']} episodes on {env_id} in {seconds:.1f}s", file=sys.stderr)
    if args.output:
        write_trajectories(args.output, trajectories)
        print(f"trajectories -> {args.output}", file=sys.stderr)
    if args.report_dir:
        from trajectoryhub.report import write_report

        report = {"stages": [summary], "comparisons": [], "seconds": seconds, "policy": args.policy,
                  "env": env_id, "tasks": str(args.tasks), "max_steps": max_steps}  # fmt: skip
        written = write_report(report, args.report_dir, trajectories_by_stage={name: trajectories})
        print(f"report -> {written['html']}", file=sys.stderr)
    return 0


def _cmd_tasks(args: argparse.Namespace) -> int:
    try:
        from agentsandbox.suites import SuiteError, get_suite, list_suites
    except ImportError as exc:
        raise ImportError("task suites come with knowlyr-sandbox: pip install 'knowlyr-hub[sandbox]'") from exc
    if args.list:
        for name in list_suites():
            try:
                suite = get_suite(name)
            except (ImportError, SuiteError) as exc:  # one broken plugin must not hide the others
                print(f"{name}\t?\tcannot load: {exc}")
                continue
            print(f"{name}\t{suite.env_id}\t{suite.description}")
        return 0
    if not args.suite or not args.output:
        print("error: tasks needs a SUITE and -o FILE (or --list)", file=sys.stderr)
        return 2
    try:
        suite = get_suite(args.suite)
        tasks = suite.generate(args.split, args.n, args.seed)
    except SuiteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for task in tasks:  # evaluate finds the suite (env, step budget, expert) from here
        task.setdefault("metadata", {}).setdefault("suite", args.suite)
        task["metadata"].setdefault("split", args.split)
        if suite.system_prompt:  # what a model policy is told (knowlyr-trainer grpo --online reads it)
            task["metadata"].setdefault("system_prompt", suite.system_prompt)
    write_jsonl(args.output, tasks)
    print(f"{len(tasks)} {args.suite} tasks ({args.split}, seed {args.seed}) -> {args.output}", file=sys.stderr)
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

    pipeline = Pipeline(domain=args.domain, log_format=args.log_format, skip_invalid=args.skip_invalid,
                        formats=tuple(args.formats), min_margin=args.min_margin)  # fmt: skip
    report = pipeline.run(args.inputs, args.output_dir)
    for error in report.errors:
        print(f"skipped {error}", file=sys.stderr)
    print(json.dumps(asdict(report), indent=2))
    print(f"{report.trajectories} trajectories -> {report.run_dir} (also {Path(args.output_dir) / 'latest'})"
          + (f"; {len(report.errors)} bad record(s) skipped" if report.errors else ""), file=sys.stderr)  # fmt: skip
    return 0


def _cmd_collect(args: argparse.Namespace) -> int:
    from trajectoryhub.policy import OpenAIPolicy
    from trajectoryhub.rollout import collect

    tasks = list(read_jsonl(args.tasks)) if args.tasks else None
    if tasks == []:
        raise DataFormatError(args.tasks, None, "no tasks (empty file)")
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


def _cmd_mcp(args: argparse.Namespace) -> int:
    from knowlyrcore.mcp import run_module

    return run_module("knowlyr-hub", "trajectoryhub.mcp_server", args.server_args)


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

    p = sub.add_parser("evaluate", help="run a policy on tasks (or summarise recorded runs): success, CI, metrics")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("-t", "--trajectories", action="append", help="summarise a recorded run (repeatable)")
    which.add_argument("--policy", help="'expert', a local checkpoint or alias (smollm2-135m), or an http(s) "
                                        "OpenAI-compatible base URL")  # fmt: skip
    p.add_argument("--tasks", help="JSONL of tasks, e.g. from `knowlyr-hub tasks`")
    p.add_argument("--env", help="environment id (default: the tasks' suite's, else the one of their domain)")
    p.add_argument("--max-steps", type=int, help="step budget per episode (default: the suite's, else 30)")
    p.add_argument("--batch-size", type=int, default=64, help="episodes played in lockstep")
    p.add_argument("--name", help="stage name in the summary and report (default: the model's)")
    p.add_argument("--split", help="split label (default: the tasks' metadata.split)")
    p.add_argument("--model", help="endpoint policies: the served model name")
    p.add_argument("--api-key")
    p.add_argument("--system-prompt", help="default: the suite's")
    p.add_argument("--max-new-tokens", type=int, default=256, help="model policies: tokens per answer")
    p.add_argument("--seed", type=int, help="episode i is reset with seed + i")
    p.add_argument("--report-dir", help="write report.json, report.md, report.html and PNG plots here")
    p.add_argument("-o", "--output", help="write the trajectories here")
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser("tasks", help="write a task suite's tasks as JSONL (--list: the installed suites)")
    p.add_argument("suite", nargs="?")
    p.add_argument("--list", action="store_true", help="list the installed suites")
    p.add_argument("--split", default="test", help="train, test or test-unseen")
    p.add_argument("-n", "--n", type=int, default=100, help="how many tasks")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output")
    p.set_defaults(func=_cmd_tasks)

    p = sub.add_parser("compare", help="compare agents with significance tests and a leaderboard")
    p.add_argument("-t", "--trajectories", required=True, action="append", help="one agent's run (repeat)")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser("pipeline", help="agent logs -> trajectories -> scored -> deduplicated -> SFT/DPO/GRPO")
    p.add_argument("inputs", nargs="+", help="log or trajectory files, folders or globs")
    p.add_argument("-o", "--output-dir", required=True, help="each run writes a new run-<time>-<id>/ here; "
                                                                 "latest/ points to the newest")  # fmt: skip
    p.add_argument("--domain", help="rubric weights of this domain (default: each task's domain)")
    p.add_argument("--log-format", default="auto", help="a knowlyr-recorder format name, or auto")
    p.add_argument("--formats", nargs="+", default=["sft", "dpo", "grpo"], choices=["sft", "dpo", "grpo"])
    p.add_argument("--min-margin", type=float, default=0.1)
    p.add_argument("--skip-invalid", action="store_true",
                   help="report bad files and records (file:line) and keep the good ones; default: stop at the first")  # fmt: skip
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

    # every argument goes to the server's own parser (`mcp --help` lists them): no prefix char matches
    p = sub.add_parser("mcp", help="run the MCP server over stdio (extra: mcp)", add_help=False, prefix_chars="\0")
    p.add_argument("server_args", nargs="*")
    p.set_defaults(func=_cmd_mcp)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (KnowlyrError, ValueError, ImportError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
