import threading

import pytest

from knowlyrcore import AgentEnv, InvalidActionError, TimeStep, Trajectory


class GuessEnv(AgentEnv):
    """Guess the task's number: `guess` answers higher/lower, the right guess ends the episode."""

    domain = "generic"
    instances: list = []
    lock = threading.Lock()

    def __init__(self, default: int = 3):
        self.default = default
        self.target = default
        self.closed = False
        with self.lock:
            GuessEnv.instances.append(self)

    def reset(self, *, task=None, seed=None):
        meta = getattr(task, "metadata", {}) or {}
        self.target = int(meta.get("target", self.default))
        return TimeStep(f"guess a number; seed={seed}")

    def step(self, action):
        if action["tool"] != "guess":
            raise InvalidActionError(f"unknown tool {action['tool']!r}")
        n = int(action["params"]["n"])
        if n == self.target:
            return TimeStep("correct", reward=1.0, terminated=True, info={"success": True})
        return TimeStep("higher" if n < self.target else "lower", info={"exit_code": 0})

    @property
    def available_tools(self):
        return ["guess"]

    def close(self):
        self.closed = True


class CountingAgent:
    """Guesses 1, 2, 3, ... ; reset() starts over."""

    def __init__(self):
        self.n = 0
        self.resets = 0

    def reset(self):
        self.n = 0
        self.resets += 1

    def __call__(self, observation):
        self.n += 1
        return {"tool": "guess", "params": {"n": self.n}, "thought": f"after {observation}"}


@pytest.fixture
def guess_env():
    GuessEnv.instances = []
    return GuessEnv


@pytest.fixture
def counting_agent():
    return CountingAgent


def make_trajectory(tid, task, reward=None, success=None, steps=1, agent="a", score=None):
    return Trajectory.model_validate({
        "id": tid, "agent": agent, "task": {"id": task, "description": f"solve {task}", "domain": "coding"},
        "steps": [{"index": i, "thought": f"t{i}", "tool_call": {"name": "bash", "parameters": {"command": f"echo {i}"}},
                   "observation": {"output": str(i), "exit_code": 0}, "reward": 0.5} for i in range(steps)],
        "outcome": {"success": success, "score": score}, "reward": reward,
    })  # fmt: skip


@pytest.fixture
def traj():
    return make_trajectory
