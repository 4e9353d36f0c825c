"""The root conftest's isolation: a test's random draws do not depend on the tests before it, and
a test that leaves a process-wide setting changed fails, naming it, and the setting is put back.

Each case runs a small pytest session of its own (a subprocess, in a scratch folder holding a copy
of the root conftest), so what it does cannot reach this session."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

DRAWS = """
import json, os, random
import pytest

def draw(name):
    with open(os.environ["DRAWS_OUT"], "a") as f:
        f.write(json.dumps([name, random.random()]) + "\\n")

def test_a():
    draw("a")
    random.random(); random.random()  # consumes the stream the next test would inherit

def test_b():
    draw("b")

@pytest.mark.parametrize("k", [1, 2])
def test_c(k):
    draw(f"c{k}")
"""

LEAKS = """
import os, socket

def test_sets_env():
    os.environ["KNOWLYR_ISOLATION_PROBE"] = "leaked"

def test_sees_clean_env():
    assert "KNOWLYR_ISOLATION_PROBE" not in os.environ

def test_changes_socket_timeout():
    socket.setdefaulttimeout(3.0)

def test_sees_default_timeout():
    assert socket.getdefaulttimeout() is None

def test_restores_via_monkeypatch(monkeypatch):
    monkeypatch.setenv("KNOWLYR_ISOLATION_PROBE", "scoped")
"""


def run_session(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def scratch(tmp_path: Path, name: str, body: str) -> Path:
    folder = tmp_path / "suite"
    folder.mkdir(exist_ok=True)
    shutil.copy(ROOT_CONFTEST, folder / "conftest.py")
    (folder / "pytest.ini").write_text("[pytest]\n")  # this folder is the rootdir, not the monorepo
    (folder / name).write_text(body)
    return folder


def test_each_test_draws_the_same_numbers_in_any_order(tmp_path, monkeypatch):
    folder = scratch(tmp_path, "test_draws.py", DRAWS)
    draws = {}
    for order in (["test_a", "test_b", "test_c"], ["test_c", "test_b", "test_a"]):
        out = tmp_path / f"{'-'.join(order)}.jsonl"
        env = {**os.environ, "DRAWS_OUT": str(out)}
        ids = [f"test_draws.py::{name}" for name in order]
        done = run_session(folder, *ids, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        draws[tuple(order)] = dict(json.loads(line) for line in out.read_text().splitlines())
    forward, backward = draws.values()
    assert forward == backward and len(forward) == 4
    assert len(set(forward.values())) == 4  # each test its own stream, not one seed for all


def test_a_test_that_leaves_a_setting_changed_fails_and_the_next_test_runs_clean(tmp_path):
    folder = scratch(tmp_path, "test_leaks.py", LEAKS)
    done = run_session(folder, "-rA", "test_leaks.py")
    out = done.stdout
    assert done.returncode == 1, out
    assert "ERROR at teardown of test_sets_env" in out
    assert "environment variable KNOWLYR_ISOLATION_PROBE: None -> 'leaked'" in out
    assert "ERROR at teardown of test_changes_socket_timeout" in out
    assert "socket default timeout: None -> 3.0" in out
    # the settings were put back: the tests after each leak pass, and monkeypatch's own undo counts as clean
    for name in ("test_sees_clean_env", "test_sees_default_timeout", "test_restores_via_monkeypatch"):
        assert f"PASSED test_leaks.py::{name}" in out, out
    assert "2 errors" in out.splitlines()[-1]


THREADS = """
import json, os

def test_share():
    with open(os.environ["THREADS_OUT"], "a") as f:
        f.write(json.dumps([os.environ.get(v) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")]) + "\\n")
"""


def test_parallel_workers_each_get_their_share_of_the_cores(tmp_path):
    folder = scratch(tmp_path, "test_threads.py", THREADS)
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    shares = {}
    for workers in ("2", "0"):  # -n 0: no workers, one process
        out = tmp_path / f"threads-{workers}.jsonl"
        done = run_session(
            folder, "-p", "xdist", "-n", workers, "test_threads.py", env={**clean, "THREADS_OUT": str(out)}
        )
        assert done.returncode == 0, done.stdout + done.stderr
        shares[workers] = json.loads(out.read_text())
    share = str(max(1, (os.cpu_count() or 1) // 2))
    assert shares["2"] == [share, share]
    assert shares["0"] == [None, None]  # one process keeps torch's own default
    kept = tmp_path / "threads-kept.jsonl"
    done = run_session(
        folder,
        "-p",
        "xdist",
        "-n",
        "2",
        "test_threads.py",
        env={**clean, "OMP_NUM_THREADS": "7", "THREADS_OUT": str(kept)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(kept.read_text())[0] == "7"  # what the user set wins


def test_threads_per_worker_divides_the_cores_and_never_gives_zero():
    import importlib.util

    spec = importlib.util.spec_from_file_location("root_conftest", ROOT_CONFTEST)
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    assert conftest.threads_per_worker(8, 2) == 4
    assert conftest.threads_per_worker(2, 2) == 1
    assert conftest.threads_per_worker(2, 4) == 1
    assert conftest.threads_per_worker(None, 2) == 1
    assert conftest.threads_per_worker(3, 2) == 1
