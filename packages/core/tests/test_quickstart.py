"""The seed README's quick-start code runs unchanged and its trajectory validates."""

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from knowlyrcore import Trajectory

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "quickstart.py"

pytestmark = [
    pytest.mark.usefixtures("clean_registry"),
    pytest.mark.skipif(not EXAMPLE.exists(), reason="examples/ is not shipped with the package"),
]


def test_quickstart_records_a_valid_trajectory():
    namespace = runpy.run_path(str(EXAMPLE))
    trajectory = namespace["trajectory"]
    again = Trajectory.model_validate(json.loads(trajectory.model_dump_json()))
    assert again == trajectory
    assert trajectory.tool_names == ["observe", "act", "submit"]
    assert trajectory.step_rewards == [0.1, 0.5, 1.0]
    assert trajectory.outcome.terminated and trajectory.agent == "my-agent"
    assert trajectory.task.id == "quickstart-1"


def test_quickstart_prints_the_trajectory():
    out = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, check=True).stdout
    assert "step 2: submit" in out
    printed = json.loads(out[out.index("\n{") + 1 :])
    Trajectory.model_validate(printed)
