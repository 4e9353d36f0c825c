"""A real sandbox episode crosses the package boundaries: recorded by core's RecorderWrapper,
accepted by ``knowlyr-core validate``, reproduced by ``knowlyr-sandbox replay``, and
collected concurrently by knowlyr-hub when it is installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentsandbox.testing import require_backend
from knowlyrcore import make
from knowlyrcore.jsonl import read_trajectories
from knowlyrcore.testing import require_module
from knowlyrcore.wrappers import RecorderWrapper

pytestmark = pytest.mark.integration
BIN = Path(sys.executable).parent


def _task(tmp_path: Path) -> dict:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "greet.py").write_text("def greet():\n    return 'helo'\n")
    (repo / "test_greet.py").write_text("from greet import greet\nassert greet() == 'hello', greet()\n")
    return {
        "id": "greet",
        "description": "Fix the typo in greet().",
        "domain": "coding",
        "repo": str(repo),
        "setup_commands": ["git init -q && git add -A && git commit -qm init"],
        "test_command": "python3 test_greet.py",
    }


SCRIPT = [
    {"tool": "grep", "params": {"pattern": "helo"}},
    {"tool": "edit_file", "params": {"path": "greet.py", "old_str": "'helo'", "new_str": "'hello'"}},
    {"tool": "run_tests", "params": {}},
    {"tool": "submit", "params": {"summary": "fixed the typo"}},
]


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_recorded_episode_validates_and_replays(backend, tmp_path):
    require_backend(backend)
    out = tmp_path / "traj.jsonl"
    env = RecorderWrapper(make("knowlyr/sandbox", backend=backend), agent_name="script", output_path=out)
    try:
        ts = env.reset(task=_task(tmp_path))
        for action in SCRIPT:
            ts = env.step(action)
    finally:
        env.close()
    assert ts.terminated
    (trajectory,) = read_trajectories(out)
    assert trajectory.outcome.success is True and trajectory.source == "env:knowlyr/sandbox"
    assert "+    return 'hello'" in trajectory.outcome.patch
    validate = subprocess.run([BIN / "knowlyr-core", "validate", str(out)], capture_output=True, text=True)
    assert validate.returncode == 0, validate.stdout + validate.stderr
    replayed = subprocess.run(
        [BIN / "knowlyr-sandbox", "replay", str(out), "--backend", backend], capture_output=True, text=True
    )
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert json.loads(replayed.stdout)["ok"] is True


def test_hub_collects_sandbox_episodes_concurrently(tmp_path):
    hub = require_module("trajectoryhub", "collect() is knowlyr-hub's (`make test` installs every package)")
    require_backend("local")
    task = _task(tmp_path)

    def agent_factory():
        actions = iter(SCRIPT)
        return lambda observation: next(actions)

    trajectories = hub.collect(
        "knowlyr/sandbox",
        agent_factory=agent_factory,
        tasks=[task],
        n_episodes=4,
        concurrency=2,
        env_kwargs={"backend": "local"},
        progress=False,
    )
    assert len(trajectories) == 4
    assert all(t.outcome.success for t in trajectories)
