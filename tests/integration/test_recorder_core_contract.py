"""knowlyr-recorder output is read by knowlyr-core's own validator: the JSONL contract holds.

Real logs converted by ``knowlyr-recorder convert`` and live episodes recorded through core's
``RecorderWrapper`` into a ``Recorder`` land in one file that ``knowlyr-core validate`` accepts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentrecorder import Recorder
from knowlyrcore.env import AgentEnv
from knowlyrcore.jsonl import read_trajectories
from knowlyrcore.testing import require
from knowlyrcore.timestep import TimeStep
from knowlyrcore.wrappers import RecorderWrapper

BIN = Path(sys.executable).parent


class EchoEnv(AgentEnv):
    def reset(self, *, task=None, seed=None) -> TimeStep:
        return TimeStep(observation="ready")

    def step(self, action: dict) -> TimeStep:
        done = action["tool"] == "submit"
        return TimeStep(observation=str(action["params"]), terminated=done, info={"success": True} if done else {})

    @property
    def available_tools(self):
        return ["echo", "submit"]


def _cli(name: str, *args: str) -> subprocess.CompletedProcess:
    script = BIN / name
    require(script.exists(), f"{name} is not installed in this environment")
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=120)


def test_converted_and_live_trajectories_validate_with_core(real_logs_folder, tmp_path):
    out = tmp_path / "trajectories.jsonl"
    converted = _cli("knowlyr-recorder", "convert", str(real_logs_folder), "-o", str(out), "-q")
    assert converted.returncode == 0, converted.stderr

    with Recorder(out) as recorder:  # appends atomically after the converted logs
        env = RecorderWrapper(EchoEnv(), agent_name="live", on_episode_end=recorder.add)
        env.reset(task="say hi then submit")
        env.step({"tool": "echo", "params": {"text": "hi"}})
        env.step({"tool": "submit", "params": {}})

    checked = _cli("knowlyr-core", "validate", str(out))
    assert checked.returncode == 0, checked.stderr
    trajectories = list(read_trajectories(out))
    assert f"{len(trajectories)} valid trajectories" in checked.stdout
    assert trajectories[-1].agent == "live" and trajectories[-1].tool_names == ["echo", "submit"]
    assert {t.source.split(":", 1)[0] for t in trajectories[:-1]} == {
        "openhands",
        "swe-agent",
        "mini-swe-agent",
        "openai-chat",
        "who-and-when",
    }
