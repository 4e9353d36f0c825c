"""The ``knowlyr-core`` command: inspect environments, domains and the trajectory schema.

knowlyr-core envs [--domain D]      registered environment ids
knowlyr-core domains                built-in and registered domain profiles
knowlyr-core domain show NAME       a profile's tools, terminal tools, rubric weights
knowlyr-core check ENV_ID           run check_env on an environment
knowlyr-core schema trajectory      the JSON Schema of a trajectory record
knowlyr-core validate FILE.jsonl    validate a trajectory file
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from knowlyrcore import __version__
from knowlyrcore.errors import KnowlyrError


def _cmd_envs(args: argparse.Namespace) -> int:
    from knowlyrcore.registry import list_envs, spec

    ids = list_envs(domain=args.domain)
    if not ids:
        print("no environments registered (install knowlyr-sandbox for the built-in ones)")
        return 0
    for env_id in ids:
        s = spec(env_id)
        where = (
            s.entry_point
            if isinstance(s.entry_point, str)
            else f"{s.entry_point.__module__}:{s.entry_point.__qualname__}"
        )
        print(f"{env_id:32} {s.domain or '':14} {where}")
    return 0


def _cmd_domains(args: argparse.Namespace) -> int:
    from knowlyrcore.domain import get_domain_profile, list_domain_profiles

    for name in list_domain_profiles():
        p = get_domain_profile(name)
        print(f"{name:14} {len(p.tools):2} tools  {p.description}")
    return 0


def _cmd_domain_show(args: argparse.Namespace) -> int:
    from knowlyrcore.domain import get_domain_profile, load_domain_profile

    p = (
        load_domain_profile(args.name)
        if args.name.endswith((".yaml", ".yml", ".json"))
        else get_domain_profile(args.name)
    )
    if args.json:
        print(p.model_dump_json(indent=2))
        return 0
    print(f"{p.name} — {p.display_name or p.name}\n{p.description}\n")
    print(f"outcome: {p.outcome.method} (success at score >= {p.outcome.success_threshold})")
    print(f"terminal tools: {', '.join(p.terminal_tools) or '(none)'}")
    print("rubric weights: " + ", ".join(f"{k}={v:g}" for k, v in p.rubric_weights.items()))
    print("\ntools:")
    for t in p.tools:
        props = t.parameters.get("properties", {})
        required = set(t.parameters.get("required", []))
        params = ", ".join(f"{k}{'' if k in required else '?'}: {v.get('type', 'any')}" for k, v in props.items())
        print(f"  {t.name}({params})  [{t.category.value}]\n      {t.description}")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from knowlyrcore.checker import check_env
    from knowlyrcore.registry import make

    task = json.loads(args.task) if args.task and args.task.lstrip().startswith("{") else args.task
    notes = check_env(make(args.env_id), task=task, make_env=lambda: make(args.env_id))
    for note in notes:
        print(f"note: {note}")
    print(f"{args.env_id}: OK — follows the AgentEnv protocol")
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from knowlyrcore.domain import DomainProfile
    from knowlyrcore.models import TaskInfo
    from knowlyrcore.trajectory import Trajectory

    model = {"trajectory": Trajectory, "task": TaskInfo, "domain": DomainProfile}[args.what]
    print(json.dumps(model.model_json_schema(), indent=2))
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from knowlyrcore.errors import DataFormatError
    from knowlyrcore.jsonl import read_trajectories

    for path in args.files:
        count = sum(1 for _ in read_trajectories(path))
        if count == 0:
            raise DataFormatError(path, None, "no trajectories (empty file)")
        print(f"{path}: {count} valid trajectories")
    return 0


def _cmd_mcp(args: argparse.Namespace) -> int:
    from knowlyrcore.mcp import run_module

    return run_module("knowlyr-core", "knowlyrcore.mcp_server", args.server_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="knowlyr-core", description="Inspect knowlyr environments, domains and schemas."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("envs", help="list registered environments")
    p.add_argument("--domain", help="only environments of this domain")
    p.set_defaults(func=_cmd_envs)

    p = sub.add_parser("domains", help="list domain profiles")
    p.set_defaults(func=_cmd_domains)

    p = sub.add_parser("domain", help="domain profile details")
    dsub = p.add_subparsers(dest="domain_command", required=True, metavar="ACTION")
    show = dsub.add_parser("show", help="show a profile (a name, or a .yaml/.json profile file)")
    show.add_argument("name")
    show.add_argument("--json", action="store_true", help="print the profile as JSON")
    show.set_defaults(func=_cmd_domain_show)

    p = sub.add_parser("check", help="check that an environment follows the AgentEnv protocol")
    p.add_argument("env_id")
    p.add_argument("--task", help="task description, or a JSON object, passed to reset()")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("schema", help="print a JSON Schema")
    p.add_argument("what", choices=["trajectory", "task", "domain"])
    p.set_defaults(func=_cmd_schema)

    p = sub.add_parser("validate", help="validate trajectory JSONL files")
    p.add_argument("files", nargs="+")
    p.set_defaults(func=_cmd_validate)

    # every argument goes to the server's own parser (`mcp --help` lists them): no prefix char matches
    p = sub.add_parser("mcp", help="run the MCP server over stdio (extra: mcp)", add_help=False, prefix_chars="\0")
    p.add_argument("server_args", nargs="*")
    p.set_defaults(func=_cmd_mcp)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KnowlyrError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
