"""``SandboxEnv`` on both backends: the core env suite, the tools, the outcome after submit."""

import pytest
from sandbox_tasks import CALC_TASK, FIX

from agentsandbox import SandboxConfig, SandboxEnv
from agentsandbox.testing import require_backend
from knowlyrcore import make
from knowlyrcore.testing import EnvConformance

pytestmark = pytest.mark.integration

CONFIG = SandboxConfig(timeout=30)


class _SandboxEnvSuite(EnvConformance):
    backend = ""
    task = CALC_TASK
    actions = [
        {"tool": "bash", "params": {"command": "echo hello"}},
        {"tool": "read_file", "params": {"path": "calc.py", "start_line": 1, "end_line": 1}},
        {"tool": "grep", "params": {"pattern": "def add", "include": "*.py"}},
        {"tool": "list_files", "params": {}},
        {"tool": "git", "params": {"subcommand": "status"}},
        {"tool": "run_tests", "params": {}},
    ]
    terminal_action = {"tool": "submit", "params": {"summary": "done"}}

    def make_env(self):
        require_backend(self.backend)
        return SandboxEnv(self.backend, CONFIG)


class TestSandboxEnvLocal(_SandboxEnvSuite):
    backend = "local"


class TestSandboxEnvDocker(_SandboxEnvSuite):
    backend = "docker"


@pytest.fixture(params=["local", "docker"])
def env(request):
    require_backend(request.param)
    env = make("knowlyr/sandbox", backend=request.param, config=CONFIG)
    yield env
    env.close()


def test_fixing_the_bug_passes_the_tests_and_yields_a_patch(env):
    first = env.reset(task=CALC_TASK)
    assert "Fix add()" in first.observation and "Tests: python3 -m unittest" in first.observation
    assert env.step({"tool": "run_tests", "params": {}}).info["exit_code"] != 0
    assert env.step(FIX).observation == "edited calc.py at line 2"
    end = env.step({"tool": "submit", "params": {}})
    assert end.terminated and end.reward == 1.0
    assert end.info["success"] is True
    assert "-    return a - b" in end.info["patch"] and "+    return a + b" in end.info["patch"]


def test_submitting_without_a_fix_fails(env):
    env.reset(task=CALC_TASK)
    end = env.step({"tool": "finish", "params": {"message": "gave up"}})
    assert end.info["success"] is False and end.reward == 0.0
    assert end.info["tests"]["failed"] == 1 or "FAILED" in end.info["tests"]["output"]


def test_reset_to_the_same_task_restores_the_repository(env):
    env.reset(task=CALC_TASK)
    env.step(FIX)
    env.step({"tool": "bash", "params": {"command": "rm check_calc.py; export X=1"}})
    env.reset(task=CALC_TASK)
    assert env.step({"tool": "read_file", "params": {"path": "calc.py"}}).observation.count("a - b") == 1
    assert env.step(
        {"tool": "bash", "params": {"command": "ls; echo x=$X; git log --oneline | wc -l"}}
    ).observation == ("calc.py\ncheck_calc.py\nx=\n1\n")


def test_edit_file_errors_are_clear(env):
    env.reset(task=CALC_TASK)
    missing = env.step({"tool": "edit_file", "params": {"path": "calc.py", "old_str": "nope", "new_str": "x"}})
    assert "old_str not found in calc.py" in missing.observation and missing.info["error"]
    env.step({"tool": "write_file", "params": {"path": "dup.txt", "content": "a\na\n"}})
    dup = env.step({"tool": "edit_file", "params": {"path": "dup.txt", "old_str": "a", "new_str": "b"}})
    assert "occurs 2 times" in dup.observation


def test_invalid_parameters_and_unknown_tools_are_error_observations(env):
    env.reset(task=CALC_TASK)
    bad = env.step({"tool": "bash", "params": {"cmd": "ls"}})
    assert bad.observation.startswith("[error]") and not bad.done
    unknown = env.step({"tool": "navigate", "params": {"url": "x"}})
    assert unknown.observation.startswith("[error]")


def test_bash_state_carries_over_between_steps(env):
    env.reset(task=CALC_TASK)
    env.step({"tool": "bash", "params": {"command": "mkdir sub && cd sub && export V=7"}})
    assert env.step({"tool": "bash", "params": {"command": "echo $V $(basename $PWD)"}}).observation == "7 sub\n"


def test_read_file_line_range_and_git_diff(env):
    env.reset(task=CALC_TASK)
    assert env.step({"tool": "read_file", "params": {"path": "calc.py", "start_line": 2}}).observation == (
        "    return a - b  # the bug the agent fixes\n"
    )
    env.step(FIX)
    assert "+    return a + b" in env.step({"tool": "git", "params": {"subcommand": "diff"}}).observation


def test_task_from_an_archive(env, tmp_path):
    import tarfile

    from sandbox_tasks import CALC_REPO

    archive = tmp_path / "calc.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(CALC_REPO, arcname="calc-1.0")
    env.reset(task={**CALC_TASK, "repo": str(archive)})
    assert env.step({"tool": "list_files", "params": {}}).observation == "calc.py\ncheck_calc.py"
