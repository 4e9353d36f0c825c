"""knowlyrcore.clikit: one error line, the same exit codes, whichever way a command is started."""

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from knowlyrcore.clikit import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    Group,
    error_line,
    exit_code_of,
    mcp_command,
    pairing_options,
    run,
)
from knowlyrcore.datasets import DEFAULT_MIN_MARGIN, DEFAULT_PAIRING
from knowlyrcore.errors import (
    NO_SUCH_FILE,
    DataFormatError,
    DomainError,
    EnvCheckError,
    InfrastructureError,
    InputError,
    InvalidActionError,
    KnowlyrError,
    RegistryError,
    no_such_file,
)
from knowlyrcore.roots import OverwriteRefusedError, PathOutsideRootsError


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (DataFormatError("f.jsonl", 3, "bad"), 2),
        (DomainError("unknown domain"), 2),
        (RegistryError("unknown environment"), 2),
        (InvalidActionError("no such tool"), 2),
        (PathOutsideRootsError("/etc/passwd is outside the roots"), 2),
        (OverwriteRefusedError("out.jsonl exists"), 2),
        (FileNotFoundError(2, "No such file or directory", "x.jsonl"), 2),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), 2),
        (InfrastructureError("sandbox died"), 1),
        (EnvCheckError(["step 0 must return a TimeStep"]), 1),
        (KnowlyrError("failed"), 1),
        (RuntimeError("a bug"), 1),
    ],
)
def test_exit_codes(error, code):
    assert exit_code_of(error) == code
    assert isinstance(error, InputError) == (code == 2 and isinstance(error, KnowlyrError))


def _cli(raise_what):
    @click.group(cls=Group)
    def cli() -> None:
        """A test CLI."""

    @cli.command()
    @click.option("--count", type=int, default=1)
    def go(count: int) -> int | None:
        if raise_what is not None:
            raise raise_what
        click.echo(f"went {count}")
        return 7 if count == 7 else None

    cli.add_command(mcp_command("knowlyr-test", "no_such_module_for_the_test"))
    return cli


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (FileNotFoundError(2, "No such file or directory", "x.jsonl"), "x.jsonl: no such file or directory"),
        (IsADirectoryError(21, "Is a directory", "runs"), "runs: Is a directory"),
        (PermissionError(13, "Permission denied"), "Permission denied"),
        (DataFormatError("f.jsonl", None, NO_SUCH_FILE), no_such_file("f.jsonl")),
    ],
)
def test_error_lines_word_a_missing_file_one_way(error, line):
    assert error_line(error) == line


def test_run_returns_codes_and_prints_one_line(capsys):
    assert run(_cli(None), ["go", "--count", "3"]) == 0
    assert capsys.readouterr().out == "went 3\n"
    assert run(_cli(None), ["go", "--count", "7"]) == 7  # a command may return its own code
    capsys.readouterr()

    assert run(_cli(DataFormatError("data.jsonl", 50000, "invalid JSON", field="steps")), ["go"]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err == "error: data.jsonl:50000: steps: invalid JSON\n"

    assert run(_cli(InfrastructureError("the sandbox died")), ["go"]) == EXIT_FAILURE
    assert capsys.readouterr().err == "error: the sandbox died\n"

    assert run(_cli(IsADirectoryError(21, "Is a directory", "runs/")), ["go"]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err == "error: runs/: Is a directory\n"

    assert run(_cli(KeyboardInterrupt()), ["go"]) == EXIT_INTERRUPTED
    assert capsys.readouterr().err.strip() == "interrupted"  # click adds a newline after ^C


def test_usage_errors_are_one_line_exit_2(capsys):
    assert run(_cli(None), ["go", "--count", "many"], prog_name="knowlyr-test") == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: Invalid value for '--count'")
    assert err.rstrip().endswith("(see 'knowlyr-test go --help')")
    assert run(_cli(None), ["nope"], prog_name="knowlyr-test") == EXIT_BAD_INPUT
    assert capsys.readouterr().err == "error: No such command 'nope'. (see 'knowlyr-test --help')\n"


def test_help_and_version_exit_0(capsys):
    assert run(_cli(None), ["--help"]) == 0
    assert "A test CLI." in capsys.readouterr().out


def test_a_bare_group_prints_its_help_not_an_error(capsys):
    assert run(_cli(None), []) == EXIT_BAD_INPUT  # click's own convention for a missing command
    err = capsys.readouterr().err
    assert err.startswith("Usage: ") and "A test CLI." in err and "error:" not in err


def test_a_bug_keeps_its_traceback():
    with pytest.raises(ZeroDivisionError):
        run(_cli(ZeroDivisionError("division by zero")), ["go"])


def test_group_runs_the_same_under_clirunner():
    result = CliRunner().invoke(_cli(DataFormatError("x.jsonl", 1, "bad")), ["go"])
    assert result.exit_code == 2 and result.output == "error: x.jsonl:1: bad\n"
    result = CliRunner().invoke(_cli(None), ["go", "--count", "x"])
    assert result.exit_code == 2 and result.output.startswith("error: Invalid value for '--count'")


def test_mcp_command_passes_every_argument_to_the_server(tmp_path, monkeypatch, capsys):
    module = tmp_path / "echo_server_for_clikit.py"
    module.write_text("def main(argv):\n    print('server got', argv)\n    return 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cli = _cli(None)
    cli.add_command(mcp_command("knowlyr-test", "echo_server_for_clikit"))
    assert run(cli, ["mcp", "--root", "/data", "--help", "-x"]) == 3
    assert capsys.readouterr().out == "server got ['--root', '/data', '--help', '-x']\n"


def test_pairing_options_parse_pair_preferences_choices_in_order():
    @click.command()
    @pairing_options("DPO")
    def pairs(**options):
        click.echo(repr(options))

    assert (
        CliRunner().invoke(pairs, []).output
        == repr({"pairing": DEFAULT_PAIRING, "min_margin": DEFAULT_MIN_MARGIN, "max_pairs_per_task": None}) + "\n"
    )
    given = ["--pairing", "all_above_margin", "--min-margin", "0.5", "--max-pairs-per-task", "3"]
    assert (
        CliRunner().invoke(pairs, given).output
        == repr({"pairing": "all_above_margin", "min_margin": 0.5, "max_pairs_per_task": 3}) + "\n"
    )
    for bad in (["--pairing", "all"], ["--min-margin", "-1"], ["--max-pairs-per-task", "0"]):
        assert CliRunner().invoke(pairs, bad).exit_code == EXIT_BAD_INPUT
    shown = CliRunner().invoke(pairs, ["--help"]).output
    assert shown.index("--pairing") < shown.index("--min-margin") < shown.index("--max-pairs-per-task")
    assert "DPO, all_above_margin: at most" in " ".join(shown.split())


def test_console_script_exit_code_is_the_processes():
    done = subprocess.run(
        [sys.executable, "-m", "knowlyrcore.cli", "domain", "show", "astrology"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.startswith("error: unknown domain 'astrology'")
    assert done.stderr.count("\n") == 1 and done.stdout == ""


def test_dash_h_survives_a_command_first_built_without_its_group():
    """click keeps a command's help option from its first context: a `make_context` outside the
    group (as tests and docs tools do) must not take `-h` away from later runs through the group."""

    @click.group(cls=Group)
    def tool() -> None:
        """A tool."""

    @tool.command()
    @click.option("--n", type=int)
    def sub(n: int | None) -> None:
        """A subcommand."""

    assert sub.make_context("sub", ["--n", "1"]).params == {"n": 1}
    for args in (["-h"], ["sub", "-h"], ["sub", "--help"]):
        result = CliRunner().invoke(tool, args)
        assert result.exit_code == 0 and result.output.startswith("Usage:"), (args, result.output)
