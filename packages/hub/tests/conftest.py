from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

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
    return Trajectory.model_validate(
        {
            "id": tid,
            "agent": agent,
            "task": {"id": task, "description": f"solve {task}", "domain": "coding"},
            "steps": [
                {
                    "index": i,
                    "thought": f"t{i}",
                    "tool_call": {"name": "bash", "parameters": {"command": f"echo {i}"}},
                    "observation": {"output": str(i), "exit_code": 0},
                    "reward": 0.5,
                }
                for i in range(steps)
            ],
            "outcome": {"success": success, "score": score},
            "reward": reward,
        }
    )


@pytest.fixture
def traj():
    return make_trajectory


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server for the session (skipped, or failed in CI's strict mode, without
    the server binaries or psycopg)."""
    from knowlyrcore.testing import require, require_module

    binaries = find_binaries()
    require(binaries is not None, "PostgreSQL server binaries not found: apt-get install postgresql")
    require_module("psycopg", "the PostgreSQL store needs psycopg: pip install 'knowlyr-hub[postgres]'")
    with PostgresServer(binaries) as server:
        yield server


# --- a throwaway PostgreSQL server: initdb in a temporary folder, started on a free loopback port
# with trust auth, stopped and removed afterwards; as root it runs as the `postgres` system user
# (the server refuses to run as root)
def find_binaries() -> Path | None:
    """The folder holding initdb and pg_ctl: on PATH, or Debian's /usr/lib/postgresql/N/bin."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(on_path).parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    return None


class PostgresServer:
    def __init__(self, binaries: Path):
        self.binaries = binaries
        self.root = Path(tempfile.mkdtemp(prefix="knowlyr-pg-"))
        self.user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]

    def _run(self, *argv: str) -> None:
        command = [str(self.binaries / argv[0]), *argv[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {done.stderr.strip() or done.stdout.strip()}")

    def __enter__(self) -> PostgresServer:
        if os.geteuid() == 0:
            shutil.chown(self.root, user=self.user)
        data = self.root / "data"
        self._run("initdb", "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=on"
        self._run("pg_ctl", "-D", str(data), "-o", options, "-l", str(self.root / "log"), "-w", "start")
        return self

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def fresh_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def __exit__(self, *exc: object) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
