"""knowlyrcore.errors.MissingExtraError and require_extra: the one way every package says an
optional extra is missing."""

import json
import subprocess
import sys

import click
import pytest

from knowlyrcore.clikit import run
from knowlyrcore.errors import InputError, KnowlyrError, MissingExtraError, require_extra
from knowlyrcore.origin import install_command

#: the checkout and wheelhouse forms (the knowlyr-* names on PyPI are another project's)
REPORT = install_command("knowlyr-hub", "report")


def test_require_extra_returns_the_module_when_it_is_installed():
    assert require_extra("json", "knowlyr-core", "gymnasium") is json


def test_require_extra_without_the_module_raises_one_line_ending_in_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "knowlyr_plots", None)  # as if it were not installed
    with pytest.raises(MissingExtraError) as raised:
        require_extra("knowlyr_plots", "knowlyr-hub", "report", "drawing report plots")
    error = raised.value
    assert str(error) == f"drawing report plots needs the 'report' extra: {REPORT}"
    assert (error.feature, error.package, error.extra) == ("drawing report plots", "knowlyr-hub", "report")
    assert error.install == REPORT
    assert error.name == "knowlyr_plots"  # as ImportError.name: the module that could not be imported
    assert isinstance(error.__cause__, ModuleNotFoundError)  # the real failure, for a traceback
    # old handlers keep working: `except ImportError`, and every deliberate knowlyr error
    assert isinstance(error, ImportError) and isinstance(error, InputError) and isinstance(error, KnowlyrError)


def test_the_feature_defaults_to_the_module_and_a_hint_follows_in_parentheses(monkeypatch):
    monkeypatch.setitem(sys.modules, "knowlyr_plots", None)
    with pytest.raises(MissingExtraError, match=r"^knowlyr_plots needs the 'report' extra: pip install"):
        require_extra("knowlyr_plots", "knowlyr-hub", "report")
    error = MissingExtraError("--policy 'x'", "knowlyr-hub", "trainer", hint="or pass an endpoint")
    assert str(error).endswith(f"{install_command('knowlyr-hub', 'trainer')} (or pass an endpoint)")


def test_a_command_prints_it_as_one_line_and_exits_2(capsys):
    @click.command()
    def plot() -> None:
        raise MissingExtraError("drawing report plots", "knowlyr-hub", "report")

    assert run(plot, []) == 2
    assert capsys.readouterr().err == f"error: drawing report plots needs the 'report' extra: {REPORT}\n"


def test_a_real_import_failure_in_a_fresh_interpreter():
    """A meta-path finder refuses gymnasium (installed or not): Python's own import machinery
    fails, and require_extra turns that failure into the one error."""
    code = """
import sys
from importlib.abc import MetaPathFinder

class Refuse(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "gymnasium":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Refuse())
from knowlyrcore.errors import MissingExtraError, require_extra
try:
    require_extra("gymnasium", "knowlyr-core", "gymnasium", "to_gymnasium")
except MissingExtraError as exc:
    print(type(exc.__cause__).__name__, exc)
"""
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    expected = (
        f"ModuleNotFoundError to_gymnasium needs the 'gymnasium' extra: {install_command('knowlyr-core', 'gymnasium')}"
    )
    assert ran.stdout.strip() == expected
