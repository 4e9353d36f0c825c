"""Where no backend works, the error is one line naming each fix, and the fix ships in the wheel.

"No backend" is made for real: ``DOCKER_HOST`` points at a socket nobody listens on and ``PATH``
holds no ``bwrap``.
"""

import os
import shutil
import subprocess
import sys

import pytest

from agentsandbox import BackendUnavailable
from agentsandbox.setup_docker import SCRIPT
from agentsandbox.testing import require_backend
from knowlyrcore import make


def _no_backend_line(tmp_path) -> str:
    return (
        f"no sandbox backend works here (docker: no Docker daemon reachable at unix://{tmp_path}/no.sock "
        "(No such file or directory); set it up as root with: python -m agentsandbox.setup_docker; "
        "local: bwrap not found (apt-get install bubblewrap))"
    )


def test_without_any_backend_the_cli_prints_one_line_with_the_fixes(tmp_path):
    env = {"PATH": str(tmp_path), "DOCKER_HOST": f"unix://{tmp_path}/no.sock"}
    done = subprocess.run(
        [sys.executable, "-m", "agentsandbox.cli", "exec", "--", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr == f"error: {_no_backend_line(tmp_path)}\n"


def test_the_quick_start_without_any_backend_raises_one_line_with_the_fixes(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no.sock")
    env = make("knowlyr/sandbox")
    with pytest.raises(BackendUnavailable) as caught:
        env.reset(task={"description": "say hi", "test_command": "test -f hi.txt"})
    env.close()
    assert str(caught.value) == _no_backend_line(tmp_path)


def test_the_setup_script_is_part_of_the_package():
    assert SCRIPT.parent.name == "agentsandbox" and SCRIPT.read_text().startswith("#!/usr/bin/env bash\n")


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_setup_docker_as_another_user_prints_the_sudo_line_and_changes_nothing():
    done = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-m",
            "agentsandbox.setup_docker",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "error: setup_docker installs packages and starts dockerd, so it needs root: "
        f"sudo {sys.executable} -m agentsandbox.setup_docker\n"
    )


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="setup_docker needs root")
def test_setup_docker_on_a_ready_machine_checks_and_changes_nothing():
    require_backend("docker")
    done = subprocess.run(
        [sys.executable, "-m", "agentsandbox.setup_docker"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert "[setup_docker] image knowlyr/sandbox-base:latest already present" in done.stderr
