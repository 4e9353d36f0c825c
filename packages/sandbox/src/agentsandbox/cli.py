"""The ``knowlyr-sandbox`` command.

knowlyr-sandbox backends                          which backends work here, and why not
knowlyr-sandbox exec [--repo DIR] -- CMD ...      run one command in a fresh sandbox
knowlyr-sandbox run TASK.json --actions A.jsonl   an episode with a scripted agent
knowlyr-sandbox run TASK.json --endpoint URL --model M   ... or a model behind an endpoint
knowlyr-sandbox replay TRAJ.jsonl                 re-execute trajectories, report differing steps
knowlyr-sandbox gc [--all] [--dry-run]            remove orphaned containers and workspaces

``--backend auto|docker|local`` picks the backend everywhere (auto: Docker when reachable).
Exit codes: 0 success, 1 the command/episode/replay failed, 2 bad usage or input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from knowlyrcore.errors import KnowlyrError


def _print(obj: Any) -> None:
    print(json.dumps(obj, ensure_ascii=False, indent=2, default=str))


def _cmd_backends(args: argparse.Namespace) -> int:
    from agentsandbox.backends import available_backends, resolve_backend

    status = available_backends()
    for name, (ok, why) in status.items():
        print(f"{name:8} {'yes' if ok else 'no ':3}  {why}")
    try:
        print(f"auto     -> {resolve_backend('auto')}")
    except KnowlyrError as exc:
        print(f"auto     -> none ({exc})")
        return 1
    return 0


def _cmd_exec(args: argparse.Namespace) -> int:
    from agentsandbox.backends import make_sandbox

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("exec: give a command after --", file=sys.stderr)
        return 2
    with make_sandbox(args.backend, timeout=args.timeout, network=args.network) as sandbox:
        if args.repo:
            sandbox.load(args.repo)
        # One argument is a shell command line (pipes, &&; run in a child bash so `exit N` is
        # its exit code); several are an argument vector that no shell parses.
        argv = ["bash", "-c", command[0]] if len(command) == 1 else command
        result = sandbox.run_argv(argv, timeout=args.timeout)
    sys.stdout.write(result.output)
    if result.error:
        print(f"[error] {result.error}", file=sys.stderr)
    return result.exit_code if result.exit_code is not None else 1


def _load_json_or_jsonl(path: str, what: str) -> list[Any]:
    """The records of a JSON file (an object, or an array of them) or a JSONL file, parsed
    strictly (no NaN, bounded nesting); an empty file is an error naming ``what`` it lacks."""
    from knowlyrcore.errors import DataFormatError
    from knowlyrcore.jsonl import loads_record

    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        raise DataFormatError(path, None, f"empty file, no {what}")
    try:
        data = loads_record(text, path, None)
        records = data if isinstance(data, list) else [data]
    except DataFormatError as exc:
        if len(lines) == 1 or not exc.problem.startswith("invalid JSON"):
            raise
        records = [loads_record(line, path, n) for n, line in lines]  # JSONL: errors name the line
    if not records:
        raise DataFormatError(path, None, f"empty JSON array, no {what}")
    return records


def _load_task(path: str) -> Any:
    """The one task of a task file: a JSON object (TaskInfo fields) or a single JSONL line."""
    from pydantic import ValidationError

    from knowlyrcore.errors import DataFormatError
    from knowlyrcore.jsonl import validation_error
    from knowlyrcore.models import TaskInfo

    records = _load_json_or_jsonl(path, "task")
    if len(records) != 1:
        raise DataFormatError(path, None, f"holds {len(records)} tasks; run takes a file with one task object")
    if not isinstance(records[0], (dict, str)):
        raise DataFormatError(path, None, f"expected a task object, got {type(records[0]).__name__}")
    try:
        return TaskInfo.coerce(records[0])
    except ValidationError as exc:
        raise validation_error(path, None, exc) from None


def _cmd_run(args: argparse.Namespace) -> int:
    from agentsandbox.agents import EndpointAgent, ScriptedAgent
    from agentsandbox.replay import DOMAIN_ENVS
    from knowlyrcore.registry import make
    from knowlyrcore.wrappers import MaxStepsWrapper, RecorderWrapper

    task = _load_task(args.task)
    env_id = args.env or DOMAIN_ENVS.get(task.domain, "knowlyr/sandbox")
    env = make(env_id, backend=args.backend)
    if args.actions:
        agent = ScriptedAgent(_load_json_or_jsonl(args.actions, "actions"))
    elif args.endpoint and args.model:
        agent = EndpointAgent(args.endpoint, args.model, domain=env.domain, api_key=args.api_key)
    else:
        print("run: give --actions FILE, or --endpoint URL and --model NAME", file=sys.stderr)
        env.close()
        return 2
    recorder = RecorderWrapper(MaxStepsWrapper(env, max_steps=args.max_steps), agent_name=args.agent_name,
                               model_name=args.model or "", output_path=args.output)  # fmt: skip
    try:
        ts = recorder.reset(task=task)
        while not ts.done:
            ts = recorder.step(agent(ts.observation))
        trajectory = recorder.get_trajectory()
    finally:
        recorder.close()
    outcome = trajectory.outcome
    _print({"env": env_id, "steps": len(trajectory.steps), "success": outcome.success, "score": outcome.score,
            "exit_status": outcome.exit_status, "output": args.output})  # fmt: skip
    return 0 if outcome.success is not False else 1


def _cmd_replay(args: argparse.Namespace) -> int:
    from agentsandbox.replay import replay_file

    kwargs: dict[str, Any] = {"backend": args.backend}
    if args.env:
        kwargs["env_id"] = args.env
    reports = replay_file(args.trajectories, **kwargs)
    for report in reports:
        print(json.dumps(report.to_dict(), ensure_ascii=False, default=str))
    return 0 if all(r.ok for r in reports) else 1


def _cmd_gc(args: argparse.Namespace) -> int:
    from agentsandbox.gc import collect_garbage

    report = collect_garbage(all_sandboxes=args.all, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {len(report.containers)} containers, {len(report.directories)} directories")
    for item in report.containers + report.directories:
        print(f"  {item}")
    for error in report.errors:
        print(f"  error: {error}", file=sys.stderr)
    return 1 if report.errors and not report.containers and not report.directories else 0


def _cmd_mcp(args: argparse.Namespace) -> int:
    from knowlyrcore.mcp import run_module

    return run_module("knowlyr-sandbox", "agentsandbox.mcp_server", args.server_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="knowlyr-sandbox", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)

    def backend(p: argparse.ArgumentParser) -> None:
        p.add_argument("--backend", default="auto", choices=["auto", "docker", "local"])

    p = sub.add_parser("backends", help="which sandbox backends work here")
    p.set_defaults(func=_cmd_backends)

    p = sub.add_parser("exec", help="run one command in a fresh sandbox")
    backend(p)
    p.add_argument("--repo", help="directory or archive to put in the workspace first")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--network", action="store_true", help="allow network access (off by default)")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p.set_defaults(func=_cmd_exec)

    p = sub.add_parser("run", help="run an episode from a task file")
    backend(p)
    p.add_argument("task", help="task JSON (TaskInfo fields)")
    p.add_argument("--env", help="environment id (default: from the task's domain)")
    p.add_argument("--actions", help="JSON/JSONL file of actions for a scripted agent")
    p.add_argument("--endpoint", help="OpenAI-compatible base URL of the policy, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", help="model name at the endpoint")
    p.add_argument("--api-key")
    p.add_argument("--agent-name", default="agent")
    p.add_argument("--max-steps", type=int, default=30)
    p.add_argument("--output", help="append the trajectory to this JSONL file")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("replay", help="re-execute trajectories and report differing observations")
    backend(p)
    p.add_argument("trajectories", help="trajectory JSONL file")
    p.add_argument("--env", help="environment id (default: from each trajectory)")
    p.set_defaults(func=_cmd_replay)

    p = sub.add_parser("gc", help="remove orphaned sandbox containers and workspaces")
    p.add_argument("--all", action="store_true", help="remove every sandbox, not only orphans")
    p.add_argument("--dry-run", action="store_true")
    p.set_defaults(func=_cmd_gc)

    # every argument goes to the server's own parser (`mcp --help` lists them): no prefix char matches
    p = sub.add_parser("mcp", help="run the MCP server over stdio (extra: mcp)", add_help=False, prefix_chars="\0")
    p.add_argument("server_args", nargs="*")
    p.set_defaults(func=_cmd_mcp)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (KnowlyrError, OSError, ValueError) as exc:
        print(f"knowlyr-sandbox {args.cmd}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
