"""The ``knowlyr-sandbox`` command.

knowlyr-sandbox backends                          which backends work here, and why not
knowlyr-sandbox exec [--repo DIR] -- CMD ...      run one command in a fresh sandbox
knowlyr-sandbox run TASK.json --actions A.jsonl   an episode with a scripted agent
knowlyr-sandbox run TASK.json --endpoint URL --model M   ... or a model behind an endpoint
                                                  (OpenAI-compatible or Anthropic)
knowlyr-sandbox replay TRAJ.jsonl                 re-execute trajectories, report differing steps
knowlyr-sandbox gc [--all] [--dry-run]            remove orphaned containers and workspaces

``--backend auto|docker|local`` picks the backend everywhere (auto: Docker when reachable).
Exit codes (``knowlyrcore.clikit``): 0 success, 1 the command/episode/replay failed or a sandbox
broke, 2 bad usage or input (a malformed file is named with its line, before any sandbox starts).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import click

from knowlyrcore.clikit import Group, mcp_command, run
from knowlyrcore.errors import DataFormatError, KnowlyrError

backend_option = click.option(
    "--backend",
    type=click.Choice(["auto", "docker", "local"]),
    default="auto",
    show_default=True,
    help="Sandbox backend (auto: Docker when reachable, else local bubblewrap).",
)


@click.group(cls=Group)
@click.version_option(package_name="knowlyr-sandbox")
def cli() -> None:
    """Run commands, episodes and replays in real sandboxes (Docker or bubblewrap)."""


@cli.command("backends")
def backends_command() -> int:
    """Which sandbox backends work here, and why not (exit 1 if none does)."""
    from agentsandbox.backends import available_backends, resolve_backend

    for name, (ok, why) in available_backends().items():
        click.echo(f"{name:8} {'yes' if ok else 'no ':3}  {why}")
    try:
        click.echo(f"auto     -> {resolve_backend('auto')}")
    except KnowlyrError as exc:
        click.echo(f"auto     -> none ({exc})")
        return 1
    return 0


@cli.command("exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@backend_option
@click.option("--repo", help="Directory or archive to put in the workspace first.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Seconds the command may run.",
)
@click.option("--network", is_flag=True, help="Allow network access (off by default).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def exec_command(backend: str, repo: str | None, timeout: float, network: bool, command: tuple[str, ...]) -> int:
    """Run one command in a fresh sandbox; exit with its exit code (1 if it never finished).

    One argument is a shell command line (pipes, &&; `exit N` is its exit code); several are
    an argument vector that no shell parses: `exec -- 'ls && exit 3'`, `exec -- printf %s x`.
    """
    from agentsandbox.backends import make_sandbox

    if not command:
        raise click.UsageError("give a command after --")
    with make_sandbox(backend, timeout=timeout, network=network) as sandbox:
        if repo:
            sandbox.load(repo)
        argv = ["bash", "-c", command[0]] if len(command) == 1 else list(command)
        result = sandbox.run_argv(argv, timeout=timeout)
    click.echo(result.output, nl=False)
    if result.error:
        click.echo(f"[error] {result.error}", err=True)
    return result.exit_code if result.exit_code is not None else 1


def _read_records(path: str, what: str) -> list[tuple[int | None, Any]]:
    """``(line, record)`` of every record of a JSONL file, or ``(None, record)`` of a JSON file
    (one document: an object, an array of them, a string), read by ``knowlyrcore.jsonl``: strict
    JSON, bounded lines and nesting, every error naming the file and line. An empty file or
    array is an error naming ``what`` it lacks."""
    from knowlyrcore.jsonl import iter_json_lines

    records: list[tuple[int | None, Any]] = []
    try:
        for line, record in iter_json_lines(path):
            records.append((line, record))
    except DataFormatError as exc:
        # a JSON document spread over lines, or not an object, fails as JSONL on its first line
        if records or not exc.problem.startswith(("invalid JSON", "expected a JSON object")):
            raise
        document = _read_json_document(path, exc)
        records = [(None, item) for item in (document if isinstance(document, list) else [document])]
        if not records:
            raise DataFormatError(path, None, f"empty JSON array, no {what}") from None
    if not records:
        raise DataFormatError(path, None, f"empty file, no {what}")
    return records


def _read_json_document(path: str, as_jsonl: DataFormatError) -> Any:
    """The file parsed as one JSON document; no larger than a JSONL line may be, else the file
    is taken as JSONL and ``as_jsonl`` (its first line's error) is raised."""
    from knowlyrcore.errors import describe_parse_error
    from knowlyrcore.jsonl import default_max_line_bytes, loads_record

    if os.path.getsize(path) > default_max_line_bytes():
        raise as_jsonl
    with open(path, "rb") as handle:
        raw = handle.read()
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DataFormatError(path, line, "not UTF-8 text; is it a binary, Latin-1 or UTF-16 file?") from None
    try:
        return loads_record(text, path, None)
    except DataFormatError as exc:
        if not exc.problem.startswith("invalid JSON"):
            raise
        try:  # the strict reader refused it: only to tell the line, which its message lacks
            json.loads(text)
        except (json.JSONDecodeError, RecursionError) as located:
            line, problem = describe_parse_error(located)
            raise DataFormatError(path, line, f"invalid JSON: {problem}") from None
        raise


def _load_task(path: str) -> tuple[Any, int | None]:
    """The one task of a task file (a JSON object of TaskInfo fields, or one JSONL line) and its line."""
    from pydantic import ValidationError

    from knowlyrcore.jsonl import validation_error
    from knowlyrcore.models import TaskInfo

    records = _read_records(path, "task")
    if len(records) != 1:
        raise DataFormatError(path, None, f"holds {len(records)} tasks; run takes a file with one task object")
    line, record = records[0]
    if not isinstance(record, (dict, str)):
        raise DataFormatError(path, line, f"expected a task object, got {type(record).__name__}")
    try:
        return TaskInfo.coerce(record), line
    except ValidationError as exc:
        raise validation_error(path, line, exc) from None


def _load_actions(path: str) -> list[dict[str, Any]]:
    """The actions of a JSON/JSONL file, each checked to be ``{"tool": str, "params": dict}``."""
    from knowlyrcore.actions import parse_action
    from knowlyrcore.errors import InvalidActionError

    records = _read_records(path, "actions")
    for position, (line, action) in enumerate(records):
        try:
            parse_action(action)
        except InvalidActionError as exc:
            raise DataFormatError(path, line, str(exc), field=None if line else f"[{position}]") from None
    return [action for _, action in records]


#: What the endpoint policy of ``run`` is told before the task.
ENDPOINT_SYSTEM_PROMPT = "You are an agent. Use the tools to complete the task."


@cli.command("run")
@backend_option
@click.argument("task")
@click.option("--env", help="Environment id (default: from the task's domain).")
@click.option("--actions", help="JSON/JSONL file of actions for a scripted agent.")
@click.option(
    "--endpoint",
    help="Base URL of the policy: OpenAI-compatible (http://127.0.0.1:8000/v1) or Anthropic (https://api.anthropic.com/v1).",
)
@click.option("--model", help="Model name at the endpoint.")
@click.option("--api-key", help="API key for the endpoint.")
@click.option("--agent-name", default="agent", show_default=True)
@click.option("--max-steps", type=click.IntRange(min=1), default=30, show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Append the trajectory to this JSONL file.")
def run_command(
    backend: str,
    task: str,
    env: str | None,
    actions: str | None,
    endpoint: str | None,
    model: str | None,
    api_key: str | None,
    agent_name: str,
    max_steps: int,
    output: str | None,
) -> int:
    """Run an episode from TASK (a JSON file of TaskInfo fields); print a JSON summary.

    Exit 0 when the episode succeeded (or has no verdict), 1 when it failed.
    """
    from agentsandbox.agents import ScriptedAgent
    from agentsandbox.env import TaskFilesError
    from agentsandbox.replay import DOMAIN_ENVS
    from knowlyrcore.endpoint import EndpointPolicy
    from knowlyrcore.jsonl import write_trajectories
    from knowlyrcore.policy import as_batch_policy
    from knowlyrcore.registry import make
    from knowlyrcore.rollout import env_tools, play_episodes, wrap_episode_env

    if not actions and not (endpoint and model):
        raise click.UsageError("give --actions FILE, or --endpoint URL and --model NAME")
    task_info, task_line = _load_task(task)  # every input is checked before a sandbox starts
    script = _load_actions(actions) if actions else None
    env_id = env or DOMAIN_ENVS.get(task_info.domain, "knowlyr/sandbox")
    environment = make(env_id, backend=backend)
    try:
        if script is not None:
            agent: Any = ScriptedAgent(script)
        else:
            tools = env_tools(environment)
            agent = EndpointPolicy(endpoint, model, api_key=api_key, system_prompt=ENDPOINT_SYSTEM_PROMPT, tools=tools)
        recorded = wrap_episode_env(environment, max_steps=max_steps, agent_name=agent_name, model_name=model or "")
        (episode,) = play_episodes([recorded], as_batch_policy(lambda: agent), [task_info], max_steps=max_steps)
    except TaskFilesError as exc:  # metadata.files / protected_paths of the task file, refused at reset
        raise DataFormatError(task, task_line, str(exc)) from None
    finally:
        environment.close()
    trajectory = episode.trajectory
    if output:
        write_trajectories(output, [trajectory], append=True)
    outcome = trajectory.outcome
    summary = {
        "env": env_id,
        "steps": len(trajectory.steps),
        "success": outcome.success,
        "score": outcome.score,
        "exit_status": outcome.exit_status,
        "output": output,
    }
    click.echo(json.dumps(summary, ensure_ascii=False, indent=2, default=str))
    return 0 if outcome.success is not False else 1


def _check_trajectories(path: str, env_id: str | None) -> None:
    """Read the whole file first: a bad record, or one whose environment is unknown, is refused
    (naming its line) before any trajectory is replayed."""
    from pydantic import ValidationError

    from agentsandbox.replay import env_id_for
    from knowlyrcore.errors import RegistryError
    from knowlyrcore.jsonl import iter_json_lines, validation_error
    from knowlyrcore.registry import spec
    from knowlyrcore.trajectory import Trajectory

    if env_id:
        spec(env_id)  # an unknown id is a RegistryError (exit 2) with suggestions
    first_line: dict[str, int] = {}  # each environment the file names -> its first trajectory
    for line, record in iter_json_lines(path):
        try:
            trajectory = Trajectory.model_validate(record)
        except ValidationError as exc:
            raise validation_error(path, line, exc) from None
        if env_id is None:
            try:
                first_line.setdefault(env_id_for(trajectory), line)
            except ValueError as exc:
                raise DataFormatError(path, line, str(exc).replace("; pass env_id=", "; pass --env")) from None
    for name, line in first_line.items():
        try:
            spec(name)
        except RegistryError as exc:
            raise DataFormatError(path, line, str(exc), field="source") from None


@cli.command("replay")
@backend_option
@click.argument("trajectories")
@click.option("--env", help="Environment id (default: from each trajectory).")
def replay_command(backend: str, trajectories: str, env: str | None) -> int:
    """Re-execute the trajectories of a JSONL file; print one JSON report per trajectory.

    Exit 0 when every replay reproduced its recording, 1 when a step differs or stopped early.
    """
    from agentsandbox.replay import replay_file

    _check_trajectories(trajectories, env)
    kwargs: dict[str, Any] = {"backend": backend}
    if env:
        kwargs["env_id"] = env
    reports = replay_file(trajectories, **kwargs)
    for report in reports:
        click.echo(json.dumps(report.to_dict(), ensure_ascii=False, default=str))
    return 0 if all(r.ok for r in reports) else 1


@cli.command("gc")
@click.option("--all", "all_sandboxes", is_flag=True, help="Remove every sandbox, not only orphans.")
@click.option("--dry-run", is_flag=True, help="List what would be removed, remove nothing.")
def gc_command(all_sandboxes: bool, dry_run: bool) -> int:
    """Remove orphaned sandbox containers and workspaces (exit 1 if nothing could be removed
    and some removal failed)."""
    from agentsandbox.gc import collect_garbage

    report = collect_garbage(all_sandboxes=all_sandboxes, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{verb} {len(report.containers)} containers, {len(report.directories)} directories")
    for item in report.containers + report.directories:
        click.echo(f"  {item}")
    for error in report.errors:
        click.echo(f"  error: {error}", err=True)
    return 1 if report.errors and not report.containers and not report.directories else 0


cli.add_command(mcp_command("knowlyr-sandbox", "agentsandbox.mcp_server"))


def main(argv: Sequence[str] | None = None) -> int:
    return run(cli, argv, prog_name="knowlyr-sandbox")


if __name__ == "__main__":
    raise SystemExit(main())
