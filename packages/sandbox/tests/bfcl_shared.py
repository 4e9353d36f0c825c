"""What the BFCL test files share: whether bfcl-eval is installed, the reply that ends a turn, the
env conformance suite on a BFCL task (the expert's calls, then that reply), and running Python
(``knowlyr-hub tasks`` among it) in a fresh process."""

import importlib.util
import subprocess
import sys
import textwrap

import pytest

from agentsandbox.bfcl.data import INSTALL_STEP
from knowlyrcore.testing import EnvConformance, require

HAVE_BFCL = importlib.util.find_spec("bfcl_eval") is not None
RESPOND = {"tool": "respond", "params": {"message": "Done."}}


def needs_bfcl():
    """Skip the calling test without bfcl-eval (``INSTALL_STEP`` installs it), or fail it under
    ``KNOWLYR_REQUIRE_COMPONENTS=1`` (CI)."""
    require(HAVE_BFCL, f"BFCL's data comes with bfcl-eval: {INSTALL_STEP}")


class BFCLEnvConformance(EnvConformance):
    """``EnvConformance`` on the subclass's ``task``: its solution's calls, then ``RESPOND``."""

    terminal_action = RESPOND

    @property
    def actions(self):
        return self.task["metadata"]["solution"][:-1]

    def test_available_tools_are_names(self, env):
        """The tools are the task's functions, so they are known once ``reset`` has shown it."""
        env.reset(task=self.task)
        tools = env.available_tools
        assert all(isinstance(t, str) and t for t in tools)
        assert {a["tool"] for a in [*self.actions, RESPOND]} <= set(tools)


def run_python(code, *args, env=None, timeout=120):
    """The stdout lines of ``python -c code args`` (dedented), which must exit 0."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def hub_tasks_without_bfcl_eval(tmp_path, suite, target):
    """``knowlyr-hub tasks <suite> --split test -o tmp_path/t.jsonl`` with bfcl-eval not importable:
    the exit code, then the stderr lines. The suite is found through its entry point (``target``),
    declared here by a dist-info of its own too, so this holds before the package is reinstalled
    with the new entry point."""
    pytest.importorskip("trajectoryhub.cli", reason="the hub is an optional sibling of knowlyr-sandbox")
    name = f"{suite}-entry"
    dist = tmp_path / f"{name.replace('-', '_')}-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[knowlyr.task_suites]\n{suite} = {target}\n")
    return run_python(f"""
        import contextlib, io, sys
        sys.path.append({str(tmp_path)!r})
        sys.modules["bfcl_eval"] = None
        from trajectoryhub.cli import main
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["tasks", {suite!r}, "--split", "test", "-o", {str(tmp_path / "t.jsonl")!r}])
        print(code)
        print(err.getvalue(), end="")
    """)
