"""The ``knowlyr-core`` command: inspect environments, domains and the trajectory schema.

knowlyr-core envs [--domain D]      registered environment ids
knowlyr-core domains                built-in and registered domain profiles
knowlyr-core domain show NAME       a profile's tools, terminal tools, rubric weights
knowlyr-core check ENV_ID [--task T] run check_env on an environment (T: a task, for one that needs it)
knowlyr-core schema trajectory      the JSON Schema of a trajectory record
knowlyr-core validate FILE.jsonl    validate a trajectory file
knowlyr-core tools index SOURCES... -o library.jsonl   one tool library from JSONL / OpenAI / MCP files
knowlyr-core tools search LIBRARY "request" [-k 5]     BM25 search of a library ('generated' for toolgen's)
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import click

from knowlyrcore.clikit import Group, json_argument, mcp_command, run


@click.group(cls=Group)
@click.version_option(package_name="knowlyr-core")
def cli() -> None:
    """Inspect knowlyr environments, domains and schemas."""


@cli.command("envs")
@click.option("--domain", help="Only environments of this domain.")
def envs_command(domain: str | None) -> None:
    """List registered environments."""
    from knowlyrcore.registry import builtin_envs_hint, list_envs, spec

    ids = list_envs(domain=domain)
    if not ids:
        click.echo(f"no environments registered ({builtin_envs_hint()})")
        return
    for env_id in ids:
        s = spec(env_id)
        where = (
            s.entry_point
            if isinstance(s.entry_point, str)
            else f"{s.entry_point.__module__}:{s.entry_point.__qualname__}"
        )
        click.echo(f"{env_id:32} {s.domain or '':14} {where}")


@cli.command("domains")
def domains_command() -> None:
    """List domain profiles."""
    from knowlyrcore.domain import get_domain_profile, list_domain_profiles

    for name in list_domain_profiles():
        p = get_domain_profile(name)
        click.echo(f"{name:14} {len(p.tools):2} tools  {p.description}")


@cli.group("domain")
def domain_group() -> None:
    """Domain profile details."""


@domain_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the profile as JSON.")
def domain_show_command(name: str, as_json: bool) -> None:
    """Show a profile (a name, or a .yaml/.json profile file)."""
    from knowlyrcore.domain import get_domain_profile, load_domain_profile

    p = load_domain_profile(name) if name.endswith((".yaml", ".yml", ".json")) else get_domain_profile(name)
    if as_json:
        click.echo(p.model_dump_json(indent=2))
        return
    click.echo(f"{p.name} — {p.display_name or p.name}\n{p.description}\n")
    click.echo(f"outcome: {p.outcome.method} (success at score >= {p.outcome.success_threshold})")
    click.echo(f"terminal tools: {', '.join(p.terminal_tools) or '(none)'}")
    click.echo("rubric weights: " + ", ".join(f"{k}={v:g}" for k, v in p.rubric_weights.items()))
    click.echo("\ntools:")
    for t in p.tools:
        props = t.parameters.get("properties", {})
        required = set(t.parameters.get("required", []))
        params = ", ".join(f"{k}{'' if k in required else '?'}: {v.get('type', 'any')}" for k, v in props.items())
        click.echo(f"  {t.name}({params})  [{t.category.value}]\n      {t.description}")


SUITES_ENTRY_POINTS = "knowlyr.task_suites"


def suites_of(env_id: str) -> list[str]:
    """The installed task suites (``knowlyr.task_suites`` entry points) whose tasks run in ``env_id``."""
    from importlib.metadata import entry_points

    found = []
    for ep in entry_points(group=SUITES_ENTRY_POINTS):
        try:
            suite = ep.load()
        except Exception:  # a broken plugin only loses its suggestion
            continue
        if getattr(suite, "env_id", None) == env_id:
            found.append(ep.name)
    return sorted(found)


def task_needed(env_id: str) -> str:
    """The line ``check`` ends with when ``env_id``'s reset needs a task and none was given: it
    names ``--task`` and, where a suite makes this environment's tasks, a command that works."""
    suites = suites_of(env_id)
    if not suites:
        return f"{env_id} needs a task to reset: give one with --task (a description, or a task as a JSON object)"
    return (
        f"{env_id} needs a task to reset: pass one with --task, e.g. one of the {suites[0]} suite's: "
        f"knowlyr-hub tasks {suites[0]} -n 1 -o task.jsonl && "
        f'knowlyr-core check {env_id} --task "$(head -n 1 task.jsonl)"'
    )


@cli.command("check")
@click.argument("env_id")
@click.option(
    "--task",
    help="Task description, or a JSON object (a line of `knowlyr-hub tasks SUITE -o FILE`), passed to "
    "reset(); needed by an environment that cannot reset without one (retail, bfcl).",
)
def check_command(env_id: str, task: str | None) -> None:
    """Check that an environment follows the AgentEnv protocol (exit 1 if it does not; exit 2 if it
    needs a task and --task gives none)."""
    from knowlyrcore.checker import check_env
    from knowlyrcore.errors import TaskRequiredError
    from knowlyrcore.registry import make

    given = json_argument(task, "--task") if task and task.lstrip().startswith("{") else task
    try:
        notes = check_env(make(env_id), task=given, make_env=lambda: make(env_id))
    except TaskRequiredError as exc:
        if given is not None:
            raise  # a task the environment cannot use: its own message says why
        raise TaskRequiredError(task_needed(env_id)) from exc
    for note in notes:
        click.echo(f"note: {note}")
    click.echo(f"{env_id}: OK — follows the AgentEnv protocol")


@cli.command("schema")
@click.argument("what", type=click.Choice(["trajectory", "task", "domain"]))
def schema_command(what: str) -> None:
    """Print a JSON Schema."""
    from knowlyrcore.domain import DomainProfile
    from knowlyrcore.models import TaskInfo
    from knowlyrcore.trajectory import Trajectory

    model = {"trajectory": Trajectory, "task": TaskInfo, "domain": DomainProfile}[what]
    click.echo(json.dumps(model.model_json_schema(), indent=2))


@cli.command("validate")
@click.argument("files", nargs=-1, required=True)
def validate_command(files: tuple[str, ...]) -> None:
    """Validate trajectory JSONL files (exit 2 at the first bad record, naming file and line)."""
    from knowlyrcore.errors import DataFormatError
    from knowlyrcore.jsonl import read_trajectories

    for path in files:
        count = sum(1 for _ in read_trajectories(path))
        if count == 0:
            raise DataFormatError(path, None, "no trajectories (empty file)")
        click.echo(f"{path}: {count} valid trajectories")


@cli.group("tools")
def tools_group() -> None:
    """Tool libraries: merge tool specs into one library, search it (BM25)."""


def load_tool_library(spec: str):
    """A library file, or ``generated`` (knowlyrcore.toolgen's 1,240 tools)."""
    from knowlyrcore.tool_library import ToolLibrary

    if spec == "generated":
        from knowlyrcore.toolgen import generate_library

        return generate_library()
    return ToolLibrary.load(spec)


@tools_group.command("index")
@click.argument("sources", nargs=-1)
@click.option(
    "--from-data",
    "data_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Also harvest the tools an agent-run data file describes or calls (repeatable).",
)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Library JSONL to write.")
def tools_index_command(sources: tuple[str, ...], data_files: tuple[str, ...], output: str) -> None:
    """Merge tool specs (JSONL, OpenAI tools arrays, MCP tools/list results, or 'generated') into one
    validated library JSONL, refusing duplicate names; tools harvested from data files are added
    when their names are new."""
    from knowlyrcore.errors import DataFormatError
    from knowlyrcore.jsonl import write_jsonl
    from knowlyrcore.tool_library import ToolLibrary, tools_in_data

    if not sources and not data_files:
        raise click.UsageError("give tool files (or 'generated') and/or --from-data files")
    libraries = [load_tool_library(source) for source in sources]
    known = {tool.name for library in libraries for tool in library}
    harvested = []
    for path in data_files:
        found = tools_in_data(path)
        if not found:
            raise DataFormatError(path, None, "no tools described or called in this file")
        for tool in found:
            if tool.name not in known:
                known.add(tool.name)
                harvested.append(tool)
    library = ToolLibrary([tool for library in libraries for tool in library] + harvested)
    write_jsonl(output, (tool.model_dump(mode="json") for tool in library))
    click.echo(f"{len(library)} tools -> {output}", err=True)


@tools_group.command("search")
@click.argument("library")
@click.argument("query")
@click.option("-k", type=click.IntRange(min=1), default=5, show_default=True)
def tools_search_command(library: str, query: str, k: int) -> None:
    """The k tools of LIBRARY (a file, or 'generated') that best match QUERY; one JSON line each."""
    for tool, score in load_tool_library(library).search(query, k=k):
        click.echo(json.dumps({"tool": tool.name, "score": round(score, 4), "description": tool.description}))


cli.add_command(mcp_command("knowlyr-core", "knowlyrcore.mcp_server"))


def main(argv: Sequence[str] | None = None) -> int:
    return run(cli, argv, prog_name="knowlyr-core")


if __name__ == "__main__":
    raise SystemExit(main())
