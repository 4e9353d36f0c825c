"""The outcome's patch without a git repository, and test counts from unittest as well as pytest.

A workspace that is not a git repository is diffed against the snapshot it was reset to; the
counts come from the real output of ``python3 -m unittest`` run in the sandbox.
"""

import pytest
from sandbox_tasks import CALC_REPO, FIX

from agentsandbox import SandboxConfig
from agentsandbox.testing import require_backend
from agentsandbox.tools import parse_test_counts
from knowlyrcore import make

CONFIG = SandboxConfig(timeout=30)
#: The calc repository as plain files: no `git init` among the setup commands.
PLAIN_TASK = {
    "id": "calc-plain",
    "description": "Fix add().",
    "repo": CALC_REPO,
    "test_command": "python3 -m unittest -q check_calc",
}
#: Four unittest tests: one passes, one fails, one errors, one is skipped.
MIXED_TESTS = """import unittest


class T(unittest.TestCase):
    def test_ok(self):
        pass

    def test_fail(self):
        self.assertEqual(1, 2)

    def test_error(self):
        raise RuntimeError("boom")

    @unittest.skip("not today")
    def test_skip(self):
        pass
"""
MIXED_TASK = {
    "id": "mixed",
    "description": "Mixed results.",
    "metadata": {"files": {"test_mixed.py": MIXED_TESTS}},
    "test_command": "python3 -m unittest test_mixed",
}


@pytest.fixture(params=["local", "docker"])
def env(request):
    require_backend(request.param)
    env = make("knowlyr/sandbox", backend=request.param, config=CONFIG)
    yield env
    env.close()


@pytest.mark.integration
def test_a_workspace_without_git_still_yields_a_patch(env):
    env.reset(task=PLAIN_TASK)
    assert env.step({"tool": "run_tests", "params": {}}).info["exit_code"] != 0  # leaves __pycache__ behind
    env.step(FIX)
    env.step({"tool": "write_file", "params": {"path": "notes/why.txt", "content": "add must add\n"}})
    # the agent's own state must not steer the patch: another directory, a GIT_DIR of its own
    env.step({"tool": "bash", "params": {"command": "cd /tmp && export GIT_DIR=/tmp/nowhere GIT_INDEX_FILE=/tmp/x"}})
    end = env.step({"tool": "submit", "params": {}})
    assert end.info["success"] is True
    patch = end.info["patch"]
    assert "diff --git a/calc.py b/calc.py" in patch
    assert (
        "-    return a - b  # the bug the agent fixes" in patch
        and "+    return a + b  # the bug the agent fixes" in patch
    )
    assert "+++ b/notes/why.txt" in patch and "+add must add" in patch
    assert "check_calc.py" not in patch and "__pycache__" not in patch
    assert not env.sandbox.workspace.root.joinpath(".git").exists()  # the throwaway repository is elsewhere


@pytest.mark.integration
def test_the_patch_of_a_workspace_without_git_shows_deletions_and_is_empty_without_changes(env):
    env.reset(task=PLAIN_TASK)
    assert env.step({"tool": "finish", "params": {}}).info["patch"] == ""
    env.reset(task=PLAIN_TASK)
    env.step({"tool": "bash", "params": {"command": "rm calc.py"}})
    patch = env.step({"tool": "finish", "params": {}}).info["patch"]
    assert "deleted file mode" in patch and "--- a/calc.py" in patch and "-def add(a, b):" in patch


@pytest.mark.integration
def test_unittest_results_are_counted(env):
    env.reset(task=MIXED_TASK)
    mid = env.step({"tool": "run_tests", "params": {}})
    assert mid.info["tests"] == {"passed": 1, "failed": 1, "error": 1}
    end = env.step({"tool": "submit", "params": {}})
    assert end.info["success"] is False
    assert {k: end.info["tests"][k] for k in ("passed", "failed", "errors")} == {"passed": 1, "failed": 1, "errors": 1}
    assert "Ran 4 tests" in end.info["tests"]["output"]


@pytest.mark.integration
def test_a_passing_unittest_run_counts_every_test(env):
    env.reset(task=PLAIN_TASK)
    env.step(FIX)
    end = env.step({"tool": "submit", "params": {}})
    assert end.info["success"] is True
    assert end.info["tests"]["passed"] == 1 and end.info["tests"]["failed"] == 0 and end.info["tests"]["errors"] == 0


def test_counts_of_unittest_and_pytest_summaries():
    """unittest: N ran minus failures, errors, skips and expected failures passed; an unexpected
    success fails the run. Two unittest runs in one output add up. pytest: its summary line."""
    one = "..F\nRan 7 tests in 0.012s\n\nFAILED (failures=1, errors=2, skipped=1, expected failures=1)\n"
    assert parse_test_counts(one) == {"passed": 2, "failed": 1, "error": 2}
    two = (
        one + "Ran 3 tests in 0.001s\n\nOK (skipped=1)\n" + "Ran 1 test in 0.000s\n\nFAILED (unexpected successes=1)\n"
    )
    assert parse_test_counts(two) == {"passed": 4, "failed": 2, "error": 2}
    assert parse_test_counts("Ran 5 tests in 0.1s\n\nOK\n") == {"passed": 5, "failed": 0, "error": 0}
    assert parse_test_counts("==== 3 passed, 1 failed, 2 errors in 0.12s ====") == {
        "passed": 3,
        "failed": 1,
        "error": 2,
    }
    assert parse_test_counts("no summary at all") == {"passed": 0, "failed": 0, "error": 0}
