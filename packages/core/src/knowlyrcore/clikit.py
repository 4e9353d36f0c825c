"""What every ``knowlyr-<pkg>`` command shares: click, one error printer, one set of exit codes.

Exit codes, the same in all six packages:

- ``0`` the command did what was asked;
- ``1`` it failed while running (a sandbox crashed, an endpoint is down, a check found faults);
- ``2`` the input is wrong: a bad option or argument (click's own usage errors), a malformed or
  unreadable file, a refused path, an unknown environment or domain — nothing was written;
- ``130`` interrupted (Ctrl-C).

A deliberate error (``KnowlyrError``) carries its code in ``exit_code``; the input-error classes
set it to 2. Every error is printed as one ``error: <message>`` line on stderr, never a traceback;
an exception that is not deliberate is a bug and keeps its traceback.

A package's CLI reads::

    import click
    from knowlyrcore.clikit import mcp_command, run

    @click.group(cls=Group)
    @click.version_option(package_name="knowlyr-x")
    def cli() -> None:
        "The knowlyr-x command."

    cli.add_command(mcp_command("knowlyr-x", "x.mcp_server"))

    def main(argv=None) -> int:
        return run(cli, argv, prog_name="knowlyr-x")
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import click

from knowlyrcore.errors import KnowlyrError, os_problem

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def exit_code_of(exc: BaseException) -> int:
    """The exit code for an error: its ``exit_code`` when it has one, 2 for file errors, else 1."""
    code = getattr(exc, "exit_code", None)
    if isinstance(code, int):
        return code
    if isinstance(exc, (OSError, UnicodeError)):
        return EXIT_BAD_INPUT
    return EXIT_FAILURE


def error_line(exc: BaseException) -> str:
    """The one line printed for an error (``OSError``: ``path: reason``, never the errno tuple; a
    missing file: ``path: no such file or directory``, the wording of ``errors.no_such_file``)."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {os_problem(exc)}" if exc.filename else os_problem(exc)
    return str(exc) or type(exc).__name__


def print_error(exc: BaseException) -> None:
    click.echo(f"error: {error_line(exc)}", err=True)


def run(command: click.Command, argv: Sequence[str] | None = None, *, prog_name: str | None = None) -> int:
    """Run a click command and return its exit code instead of calling ``sys.exit``.

    Tests call ``main([...])`` and read the code; the console script passes it to ``sys.exit``.
    A command returning an int returns that code.
    """
    try:
        result = command.main(args=list(argv) if argv is not None else None, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Exit as exc:  # --help, --version, ctx.exit(n)
        return exc.exit_code
    except click.exceptions.NoArgsIsHelpError as exc:  # a bare group: its help, as click prints it
        click.echo(exc.ctx.get_help(), err=True)
        return exc.exit_code
    except click.UsageError as exc:  # exit 2, as click itself would, in the same one-line form
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        click.echo(f"error: {exc.format_message()}{hint}", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        return exc.exit_code
    except click.Abort:
        click.echo("interrupted", err=True)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return EXIT_INTERRUPTED
    except (KnowlyrError, OSError, UnicodeError) as exc:
        print_error(exc)
        return exit_code_of(exc)
    return result if isinstance(result, int) else EXIT_OK


HELP_OPTION_NAMES = ["-h", "--help"]


class Group(click.Group):
    """A click group whose standalone runs (``cli()``, click's ``CliRunner``) also go through
    :func:`run`, so they print and exit exactly as ``main([...])`` does; ``-h`` is ``--help`` on the
    group and on every command added to it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.context_settings.setdefault("help_option_names", HELP_OPTION_NAMES)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        # Each command gets the names itself rather than inheriting them from the group's context:
        # click (8.2+) builds a command's help option once and keeps it, so a command whose first
        # context had no parent (``make_context``, a direct ``main``) would otherwise lose ``-h`` for good.
        if cmd.add_help_option:
            cmd.context_settings.setdefault("help_option_names", HELP_OPTION_NAMES)
        super().add_command(cmd, name)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        sys.exit(run(self, args, prog_name=prog_name))


def mcp_command(dist: str, module: str) -> click.Command:
    """``<dist> mcp [ARGS]``: run the package's MCP server over stdio; every argument is the
    server's own (``mcp --help`` lists them), so click parses none of them."""

    @click.command(
        "mcp",
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        help="Run the MCP server over stdio (extra: mcp); `mcp --help` lists its options.",
    )
    @click.argument("server_args", nargs=-1, type=click.UNPROCESSED)
    def command(server_args: tuple[str, ...]) -> int:
        from knowlyrcore.mcp import run_module

        return run_module(dist, module, server_args)

    return command


def pairing_options(applies_to: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--pairing``, ``--min-margin`` and ``--max-pairs-per-task``: the choices of
    ``knowlyrcore.datasets.pair_preferences``, the one rule every command that builds DPO pairs
    applies. ``applies_to`` (``"DPO"``) starts each help text where the command does more than pair."""
    from knowlyrcore.datasets import DEFAULT_MIN_MARGIN, DEFAULT_PAIRING, PAIRINGS

    def helped(text: str, condition: str = "") -> str:
        scope = ", ".join(s for s in (applies_to, condition) if s)
        return f"{scope}: {text}" if scope else text[0].upper() + text[1:]

    options = [
        click.option(
            "--pairing",
            type=click.Choice(PAIRINGS),
            default=DEFAULT_PAIRING,
            show_default=True,
            help=helped("each task's best attempt against its worst, or every pair of its attempts."),
        ),
        click.option(
            "--min-margin",
            type=click.FloatRange(min=0),
            default=DEFAULT_MIN_MARGIN,
            show_default=True,
            help=helped("smallest reward difference between chosen and rejected."),
        ),
        click.option(
            "--max-pairs-per-task",
            type=click.IntRange(min=1),
            help=helped("at most this many pairs per task (largest margins first).", "all_above_margin"),
        ),
    ]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):  # as if stacked in this order above the command
            command = option(command)
        return command

    return decorate


def json_argument(text: str | None, what: str = "value") -> Any:
    """Parse a JSON option value, or raise a usage error (exit 2) saying where it broke."""
    import json

    if text is None:
        return None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        where = f" (line {exc.lineno}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise click.BadParameter(f"{what} is not valid JSON{where}") from None


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "Group",
    "error_line",
    "exit_code_of",
    "json_argument",
    "mcp_command",
    "pairing_options",
    "print_error",
    "run",
]
