"""`knowlyr-core check` on an environment that cannot reset without a task (issue #43): not a
protocol fault, but one line asking for `--task`, exit code 2; the README's command works."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from knowlyrcore import AgentEnv, TimeStep, check_env, register
from knowlyrcore.cli import main
from knowlyrcore.errors import InputError, TaskRequiredError

pytestmark = pytest.mark.usefixtures("clean_registry")

README = Path(__file__).resolve().parents[1] / "README.md"


class NeedsTaskEnv(AgentEnv):
    """Resets only with a task carrying ``metadata.board``, as a suite's environment does."""

    domain = "generic"

    def __init__(self):
        self.closed = 0

    def reset(self, *, task=None, seed=None) -> TimeStep:
        board = (task or {}).get("metadata", {}).get("board") if isinstance(task, dict) else None
        if board is None:
            raise TaskRequiredError("needs-task: the task has no metadata.board")
        return TimeStep(observation=f"board {board}")

    def step(self, action) -> TimeStep:
        return TimeStep(observation="done", terminated=True)

    @property
    def available_tools(self):
        return ["submit"]

    def close(self):
        self.closed += 1


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_error_is_an_input_error_and_a_value_error():
    assert issubclass(TaskRequiredError, InputError) and issubclass(TaskRequiredError, ValueError)
    assert TaskRequiredError.exit_code == 2


def test_check_env_passes_it_on_instead_of_calling_it_a_fault():
    env = NeedsTaskEnv()
    with pytest.raises(TaskRequiredError, match="metadata.board"):
        check_env(env)
    assert env.closed >= 1  # closed on the way out
    assert check_env(NeedsTaskEnv(), task={"metadata": {"board": 3}}) == []


def test_check_without_task_says_one_line_naming_task_and_exits_2(capsys):
    register("t/needs-task", NeedsTaskEnv, domain="generic")
    code, out, err = run(capsys, "check", "t/needs-task")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("error: t/needs-task needs a task to reset")
    assert "--task" in err
    assert "breaks the AgentEnv protocol" not in err


def test_check_with_a_task_it_can_use_passes(capsys):
    register("t/needs-task", NeedsTaskEnv, domain="generic")
    code, out, _ = run(capsys, "check", "t/needs-task", "--task", '{"metadata": {"board": 1}}')
    assert code == 0 and "t/needs-task: OK" in out


def test_check_with_a_task_it_cannot_use_says_why_exit_2(capsys):
    register("t/needs-task", NeedsTaskEnv, domain="generic")
    code, out, err = run(capsys, "check", "t/needs-task", "--task", "just words")
    assert (code, out) == (2, "")
    assert err == "error: needs-task: the task has no metadata.board\n"


def test_check_help_documents_task(capsys):
    code, out, _ = run(capsys, "check", "--help")
    text = " ".join(out.split())  # as wrapped to the terminal's width
    assert code == 0 and "--task" in text and "knowlyr-hub tasks SUITE" in text


# -- knowlyr/retail, the environment the issue named ---------------------------------------------


def needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed next to knowlyr-core here")


def test_retail_without_task_asks_for_one_from_its_suite(capsys):
    needs("agentsandbox")
    code, out, err = run(capsys, "check", "knowlyr/retail")
    assert (code, out) == (2, "")
    assert err == (
        "error: knowlyr/retail needs a task to reset: pass one with --task, e.g. one of the retail suite's: "
        "knowlyr-hub tasks retail -n 1 -o task.jsonl && "
        'knowlyr-core check knowlyr/retail --task "$(head -n 1 task.jsonl)"\n'
    )


@pytest.mark.parametrize("env_id", ["knowlyr/retail", "knowlyr/bfcl", "knowlyr/bfcl-multi-turn"])
def test_every_suite_env_without_a_task_asks_for_one_rather_than_calling_it_a_fault(capsys, env_id):
    needs("agentsandbox")
    if env_id.startswith("knowlyr/bfcl"):
        needs("bfcl_eval")
    code, out, err = run(capsys, "check", env_id)
    assert (code, out) == (2, ""), err
    assert err.startswith(f"error: {env_id} needs a task to reset: pass one with --task"), err
    assert "protocol" not in err and len(err.splitlines()) == 1


def _shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")])}
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_suggested_command_and_the_readmes_run_as_written(tmp_path):
    needs("agentsandbox")
    needs("trajectoryhub")
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    documented = [b for b in blocks if "--task" in b]
    assert len(documented) == 1, "packages/core/README.md shows `check --task` in one bash block"
    done = _shell(documented[0], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "knowlyr/retail: OK — follows the AgentEnv protocol"

    bare = _shell("knowlyr-core check knowlyr/retail", tmp_path)
    assert bare.returncode == 2 and "Traceback" not in bare.stderr
    suggested = bare.stderr.strip().split("e.g. one of the retail suite's: ", 1)[1]
    (tmp_path / "again").mkdir()
    again = _shell(suggested, tmp_path / "again")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "knowlyr/retail: OK — follows the AgentEnv protocol"
