"""A `knowlyr-*` command stopped by the wrong-sibling check (issue #43): the one line naming the
fix, as `error: <line>`, exit code 2 (the user fixes the install before running again), and no
traceback above it.

The installed console scripts run for real, in the two states the check refuses (as
packages/core/tests/test_origin.py simulates them in-process):

- knowlyr-core at another version (the other project's 0.1.2): a ``sitecustomize`` makes
  ``importlib.metadata.version("knowlyr-core")`` answer ``0.1.2``;
- the other project's knowlyr-core, which has no ``knowlyrcore.origin``: a ``knowlyrcore``
  package of its own ahead on ``PYTHONPATH``.

Code that catches the ``ImportError`` still gets it, message unchanged (test_origin.py).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

from knowlyrcore import origin

#: console script (named as its distribution) -> its import package
SCRIPTS = {
    "knowlyr-sandbox": "agentsandbox",
    "knowlyr-recorder": "agentrecorder",
    "knowlyr-reward": "agentreward",
    "knowlyr-hub": "trajectoryhub",
    "knowlyr-trainer": "agenttrainer",
}

CORE_AT_ANOTHER_VERSION = """
import importlib.metadata as metadata

_real = metadata.version
metadata.version = lambda dist: "0.1.2" if dist == "knowlyr-core" else _real(dist)
"""


def script_path(name: str) -> Path:
    """The installed console script ``name`` (where pip put this interpreter's scripts)."""
    if importlib.util.find_spec(SCRIPTS[name]) is None:
        pytest.skip(f"{name} is not installed here")
    for folder in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        if (folder / name).is_file():
            return folder / name
    pytest.skip(f"no {name} console script next to {sys.executable}")


def run_script(name: str, path_first: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(path_first), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [str(script_path(name)), "--help"], capture_output=True, text=True, timeout=300, env=env, cwd=path_first
    )


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_core_at_another_version_stops_the_command_in_one_line(name, tmp_path):
    (tmp_path / "sitecustomize.py").write_text(CORE_AT_ANOTHER_VERSION)
    done = run_script(name, tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    expected = origin.mismatch_message(name, metadata.version(name), "knowlyr-core", "0.1.2")
    assert done.stderr == f"error: {expected}\n"
    assert (done.returncode, done.stdout) == (2, "")


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_the_other_projects_core_stops_the_command_in_one_line(name, tmp_path):
    (tmp_path / "knowlyrcore").mkdir()
    (tmp_path / "knowlyrcore" / "__init__.py").write_text('__version__ = "0.1.2"\n')
    done = run_script(name, tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr == (
        f"error: {name} needs knowlyr-core from the knowlyr checkout, not PyPI's (another project); "
        "fix: pip install ./packages/core (docs/install.md)\n"
    )
    assert (done.returncode, done.stdout) == (2, "")
