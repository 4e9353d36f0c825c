"""How knowlyr's messages say to install a package or an extra (issue #43): the checkout or
wheelhouse form from ``knowlyrcore.origin.install_command``, never ``pip install 'knowlyr-hub[x]'``,
which the public index answers with another project's package; and an ``ImportError`` the
origin check raises ends an uncaught run in one line."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

from knowlyrcore import origin
from knowlyrcore.errors import MissingExtraError
from knowlyrcore.mcp import missing_sdk
from knowlyrcore.origin import install_command
from knowlyrcore.registry import builtin_envs_hint

OURS = metadata.version("knowlyr-core")


def test_an_extra_of_ours_names_the_checkout_and_the_wheelhouse_at_our_version():
    assert install_command("knowlyr-core", "gymnasium") == (
        "pip install './packages/core[gymnasium]' from the knowlyr checkout, "
        f"or pip install --find-links WHEELHOUSE 'knowlyr-core[gymnasium]=={OURS}' (docs/install.md)"
    )


def test_a_package_of_ours_without_extra():
    assert install_command("knowlyr-sandbox") == (
        "pip install ./packages/sandbox from the knowlyr checkout, "
        f"or pip install --find-links WHEELHOUSE knowlyr-sandbox=={OURS} (docs/install.md)"
    )


def test_another_distribution_keeps_the_plain_form():
    assert install_command("someone-else", "x") == "pip install 'someone-else[x]'"


def test_an_extra_that_brings_a_sibling_names_its_folder_too():
    """From a checkout pip must be given the sibling's path as well: its pin names a version no index has."""
    if origin.installed_version("knowlyr-hub") is None:
        pytest.skip("knowlyr-hub is not installed next to knowlyr-core here")
    assert install_command("knowlyr-hub", "trainer").startswith(
        "pip install ./packages/trainer './packages/hub[trainer]' from the knowlyr checkout, "
    )
    assert install_command("knowlyr-hub", "report").startswith("pip install './packages/hub[report]' from ")


def test_missing_extra_error_says_it(monkeypatch):
    error = MissingExtraError("drawing report plots", "knowlyr-hub", "report")
    assert error.install == install_command("knowlyr-hub", "report")
    assert str(error) == f"drawing report plots needs the 'report' extra: {error.install}"
    assert "pip install 'knowlyr-hub[report]'" not in str(error)
    assert "'./packages/hub[report]'" in str(error) and f"'knowlyr-hub[report]=={OURS}'" in str(error)


def test_the_mcp_line_and_the_registry_hint_say_it():
    assert missing_sdk("knowlyr-core") == (
        f"error: knowlyr-core mcp needs the 'mcp' extra: {install_command('knowlyr-core', 'mcp')}"
    )
    assert "pip install knowlyr-sandbox" not in builtin_envs_hint()
    assert builtin_envs_hint() == (
        f"knowlyr-sandbox provides the built-in knowlyr/* environments: {install_command('knowlyr-sandbox')}"
    )


# -- an origin ImportError nothing catches: one line ------------------------------------------------


def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_exit_in_one_line_uncaught_is_one_error_line_exit_2():
    done = python("from knowlyrcore.origin import exit_in_one_line\nraise exit_in_one_line(ImportError('fix: x'))")
    assert (done.returncode, done.stdout, done.stderr) == (2, "", "error: fix: x\n")


def test_exit_in_one_line_leaves_caught_errors_and_other_errors_alone():
    done = python(
        "from knowlyrcore.origin import exit_in_one_line\n"
        "try:\n    raise exit_in_one_line(ImportError('fix: x'))\n"
        "except ImportError as exc:\n    print('caught', exc)\n"
        "raise RuntimeError('a bug')"
    )
    assert done.stdout == "caught fix: x\n"
    assert done.returncode == 1 and "Traceback" in done.stderr and "RuntimeError: a bug" in done.stderr
