"""`python -m <pkg>.mcp_server` without the mcp extra (issue #43): one `error:` line naming the
extra and how to install it, exit code 2 (a problem the user fixes before running again, as
`knowlyr-<pkg> mcp` says it), never a traceback.

The extra is hidden as when it is not installed: a ``sitecustomize`` puts a meta-path finder in
front that refuses ``mcp`` and ``anyio`` (both come with the extra), so Python's own import
machinery raises ``ModuleNotFoundError`` for them.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from knowlyrcore.errors import MissingExtraError

SERVERS = {
    "knowlyrcore": "knowlyr-core",
    "agentsandbox": "knowlyr-sandbox",
    "agentrecorder": "knowlyr-recorder",
    "agentreward": "knowlyr-reward",
    "trajectoryhub": "knowlyr-hub",
    "agenttrainer": "knowlyr-trainer",
}

HIDE_THE_EXTRA = """
import sys
from importlib.abc import MetaPathFinder


class NoMCPExtra(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("mcp", "anyio"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoMCPExtra())
"""


@pytest.fixture
def without_the_extra(tmp_path):
    """An environment for a subprocess in which `import mcp` and `import anyio` fail."""
    (tmp_path / "sitecustomize.py").write_text(HIDE_THE_EXTRA)
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


@pytest.mark.parametrize("package", sorted(SERVERS))
def test_python_m_mcp_server_without_the_sdk_is_one_line(package, without_the_extra, tmp_path):
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{SERVERS[package]} is not installed here")
    dist = SERVERS[package]
    ran = subprocess.run(
        [sys.executable, "-m", f"{package}.mcp_server"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=without_the_extra,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in ran.stderr, ran.stderr
    assert ran.stderr == f"error: {MissingExtraError(f'{dist} mcp', dist, 'mcp')}\n"
    assert ran.returncode == 2
    assert ran.stdout == ""


def test_the_hidden_extra_is_really_hidden(without_the_extra):
    """The harness itself: `import mcp` fails in that subprocess, whether or not the SDK is installed."""
    ran = subprocess.run(
        [sys.executable, "-c", "import mcp"], capture_output=True, text=True, timeout=60, env=without_the_extra
    )
    assert ran.returncode == 1 and "ModuleNotFoundError: No module named 'mcp'" in ran.stderr
