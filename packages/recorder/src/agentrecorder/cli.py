"""``knowlyr-recorder``: convert agent logs, validate, summarise, show and view trajectories.

    knowlyr-recorder convert logs/ 'runs/**/*.traj' -o trajectories.jsonl --skip-invalid
    knowlyr-recorder export --to atif trajectories.jsonl -o atif.jsonl   # or --to adp; logs too
    knowlyr-recorder validate trajectories.jsonl
    knowlyr-recorder validate -f atif trajectory.json   # ATIF's required fields and types
    knowlyr-recorder stats trajectories.jsonl [--json]
    knowlyr-recorder show trajectories.jsonl --index 3
    knowlyr-recorder view run.traj -o run.html
    knowlyr-recorder formats
    knowlyr-recorder mcp                       # MCP server over stdio (extra: mcp)

``export`` writes the trajectory standards (ATIF, ADP; ``agentrecorder.interop``), streaming
``.jsonl`` output with a progress bar, so a data set of any size converts in bounded memory.
``stats``, ``show`` and ``view`` accept trajectory JSONL or any supported log (converted on
the fly) and read every input to its end, so a bad record anywhere is an error. Errors are one
line, ``error: file[:line]: field: problem``, never a traceback (``knowlyrcore.clikit``); exit
status 2 means bad input (a malformed file, an unknown format or id, a bad option), 1 a failure
while running. ``convert --skip-invalid`` converts the good files, warns about each bad one and
exits 0 as long as at least one file converted; when none did it exits 2 and leaves an existing
output file untouched.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import click

from agentrecorder import registry
from agentrecorder.atif_validation import check_atif_file
from agentrecorder.convert import (
    FileResult,
    convert_paths,
    expand_inputs,
    is_trajectory_file,
    iter_convert,
    load_trajectories,
)
from agentrecorder.errors import ConversionError
from agentrecorder.interop import WRITERS, export_file
from knowlyrcore.clikit import EXIT_BAD_INPUT, EXIT_OK, Group, mcp_command, print_error, run
from knowlyrcore.errors import KnowlyrError
from knowlyrcore.trajectory import Trajectory

PROG = "knowlyr-recorder"


def _plural(n: int, word: str) -> str:
    return f"{n} {word if n == 1 else word[:-1] + 'ies' if word.endswith('y') else word + 's'}"


def _note(message: str) -> None:
    """A progress line on stderr (stdout carries only the command's result)."""
    click.echo(message, err=True)


def _known_format(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``-f``: ``auto`` or a format that loads; anything else is a usage error (exit 2)."""
    if value != "auto":
        try:
            registry.get_adapter(value)
        except ConversionError as exc:
            raise click.BadParameter(exc.problem, ctx, param) from None
    return value


def _inputs(command: Callable[..., Any]) -> Callable[..., Any]:
    """INPUT... and ``-f/--format``, shared by every command that reads logs."""
    command = click.option(
        "-f",
        "--format",
        "fmt",
        metavar="FORMAT",
        default="auto",
        show_default=True,
        callback=_known_format,
        help="Log format (see `formats`), or auto to detect it.",
    )(command)
    return click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")(command)


def _pick_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--index`` / ``--id`` of ``show`` and ``view``."""
    command = click.option("--id", "wanted_id", help="Pick the trajectory with this id instead.")(command)
    return click.option(
        "--index", type=click.IntRange(min=0), default=0, show_default=True, help="Which trajectory (0-based)."
    )(command)


def _all_trajectories(inputs: Sequence[str], fmt: str) -> Iterator[Trajectory]:
    for path in expand_inputs(inputs):
        yield from load_trajectories(path, fmt)


def _pick(inputs: Sequence[str], fmt: str, index: int, wanted_id: str | None) -> Trajectory:
    """The trajectory at ``index`` (or with ``wanted_id``); every input is read to its end first,
    so a bad record after the one picked is still an error (nothing is printed or written)."""
    picked, seen = None, 0
    for position, trajectory in enumerate(_all_trajectories(inputs, fmt)):
        seen += 1
        if picked is None and (trajectory.id == wanted_id if wanted_id is not None else position == index):
            picked = trajectory
    if picked is None:
        which = f"id {wanted_id!r}" if wanted_id is not None else f"index {index}"
        raise ConversionError(", ".join(inputs), None, f"no trajectory with {which} ({_plural(seen, 'trajectory')})")
    return picked


@click.group(cls=Group, no_args_is_help=False)
@click.version_option(package_name=PROG)
def cli() -> None:
    """Turn agent framework logs into knowlyr trajectories.

    Exit status: 0 done, 1 failed while running, 2 bad input (a malformed or unreadable
    file, an unknown format or trajectory id, a bad option).
    """


@cli.command("convert")
@_inputs
@click.option("-o", "--output", help="Output JSONL (written atomically); default: stdout.")
@click.option("--skip-invalid", is_flag=True, help="Convert the good files, warn about and skip bad ones.")
@click.option("-q", "--quiet", is_flag=True, help="Report only problems.")
def convert_command(inputs: tuple[str, ...], fmt: str, output: str | None, skip_invalid: bool, quiet: bool) -> None:
    """Convert logs into trajectory JSONL.

    INPUT is a file, a directory or a glob. The first bad file stops the batch and nothing is
    written (exit 2); with --skip-invalid bad files are skipped, and the exit status is 2 only
    when none converted (an existing output is then left as it was).
    """
    output = None if output in (None, "-") else output
    report, collected = convert_paths(inputs, output, fmt, skip_invalid=skip_invalid)
    for result in report.files:
        if result.error is not None:
            click.echo(f"warning: skipped {result.error}", err=True)
        elif not quiet:
            how = result.detection or f"format {result.format}"
            _note(
                f"{result.path}: {how}: {_plural(result.trajectories, 'trajectory')}, {_plural(result.steps, 'step')}"
            )
    failed = len(report.failed)
    if not report.converted:
        kept = f", {output} left as it was" if output else ""
        raise ConversionError(", ".join(inputs), None, f"no file converted ({failed} skipped); nothing written{kept}")
    if output is None:
        from knowlyrcore.jsonl import dumps_record

        lines = [dumps_record(t.model_dump(mode="json"), "<stdout>", n) for n, t in enumerate(collected, start=1)]
        click.echo("".join(line + "\n" for line in lines), nl=False)  # all checked before any is printed
    if not quiet or failed:
        _note(
            f"wrote {_plural(report.written, 'trajectory')} from {_plural(len(report.converted), 'file')} to "
            f"{output or 'stdout'}" + (f"; {_plural(failed, 'file')} skipped" if failed else "")
        )


@cli.command("export")
@_inputs
@click.option("--to", "target", type=click.Choice(sorted(WRITERS)), required=True, help="The standard to write.")
@click.option(
    "-o",
    "--output",
    required=True,
    help=".jsonl: one document per line, streamed; .json: one document (written atomically).",
)
@click.option("--progress/--no-progress", default=None, help="Progress bar on stderr [default: when a terminal].")
@click.option("-q", "--quiet", is_flag=True, help="Report only problems.")
def export_command(
    inputs: tuple[str, ...], fmt: str, target: str, output: str, progress: bool | None, quiet: bool
) -> None:
    """Write logs, data sets or trajectory JSONL as ATIF or ADP.

    INPUT is a file, a directory or a glob. The first bad record stops the export and nothing is
    written (exit 2); an existing output is left as it was.
    """
    written = export_file(inputs, output, target, fmt, progress=progress)
    if not quiet:
        _note(f"wrote {_plural(written, target.upper() + ' document')} to {output}")


@cli.command("validate")
@_inputs
def validate_command(inputs: tuple[str, ...], fmt: str) -> int:
    """Check trajectory JSONL (or that a log converts).

    An ATIF file (named with -f atif or detected) is also checked against ATIF's required
    fields and types. Every file is checked; each bad one is an `error:` line, and the exit
    status is 2 if any was bad.
    """
    from knowlyrcore.jsonl import read_trajectories

    bad = 0
    for path in expand_inputs(inputs):
        try:
            if is_trajectory_file(path):
                count = steps = 0
                for trajectory in read_trajectories(path):
                    count += 1
                    steps += len(trajectory.steps)
                click.echo(f"{path}: ok, {_plural(count, 'trajectory')}, {_plural(steps, 'step')}")
            else:
                result = FileResult(path)
                for _ in iter_convert(path, fmt, result=result):  # streamed: only the counts are kept
                    pass
                spec = ""
                if result.format == "atif":
                    check_atif_file(path)
                    spec = " (valid ATIF)"
                click.echo(
                    f"{path}: ok as {result.format} log{spec}, {_plural(result.trajectories, 'trajectory')}, "
                    f"{_plural(result.steps, 'step')}"
                )
        except KnowlyrError as exc:
            bad += 1
            print_error(exc)
    return EXIT_BAD_INPUT if bad else EXIT_OK


@cli.command("stats")
@_inputs
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def stats_command(inputs: tuple[str, ...], fmt: str, as_json: bool) -> None:
    """Steps, tool histogram, success rate, tokens."""
    from agentrecorder.stats import format_summary, summarize

    summary = summarize(_all_trajectories(inputs, fmt))
    click.echo(json.dumps(summary, indent=2) if as_json else format_summary(summary))


@cli.command("show")
@_inputs
@_pick_options
@click.option("--max-lines", type=click.IntRange(min=1), default=12, show_default=True, help="Lines shown per text.")
def show_command(inputs: tuple[str, ...], fmt: str, index: int, wanted_id: str | None, max_lines: int) -> None:
    """Print one trajectory."""
    from agentrecorder.show import render

    click.echo(render(_pick(inputs, fmt, index, wanted_id), max_lines=max_lines))


@cli.command("view")
@_inputs
@_pick_options
@click.option("-o", "--output", help="HTML file to write, atomically (default: <input stem>.html).")
def view_command(inputs: tuple[str, ...], fmt: str, index: int, wanted_id: str | None, output: str | None) -> None:
    """Write one trajectory as a self-contained HTML page."""
    from agentrecorder.view import render_html
    from knowlyrcore.jsonl import write_bytes_atomic

    trajectory = _pick(inputs, fmt, index, wanted_id)
    page = Path(output or f"{Path(inputs[0]).stem}.html")
    write_bytes_atomic(page, render_html(trajectory).encode("utf-8"))
    _note(f"wrote {page} ({_plural(len(trajectory.steps), 'step')})")


@cli.command("formats")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def formats_command(as_json: bool) -> None:
    """List the supported log formats, in auto-detection order."""
    adapters, broken = registry.adapters(), registry.broken()
    if as_json:
        listed = [{"name": a.name, "priority": a.priority, "description": a.description} for a in adapters]
        click.echo(json.dumps(listed + [{"name": n, "error": why} for n, why in broken.items()]))
        return
    width = max(len(name) for name in [a.name for a in adapters] + list(broken))
    click.echo("formats, in auto-detection order:")
    for a in adapters:
        click.echo(f"  {a.name.ljust(width)}  {a.description}")
    for name, why in broken.items():
        click.echo(f"  {name.ljust(width)}  cannot be loaded: {why}")


cli.add_command(mcp_command(PROG, "agentrecorder.mcp_server"))


def main(argv: Sequence[str] | None = None) -> int:
    return run(cli, argv, prog_name=PROG)


if __name__ == "__main__":
    raise SystemExit(main())
