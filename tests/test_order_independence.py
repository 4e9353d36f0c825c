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
    # the user sets MKL_NUM_THREADS and not OMP_NUM_THREADS: the one they set must be kept
    user = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    user["MKL_NUM_THREADS"] = "7"
    shares = {}
    for workers in ("2", "0"):  # -n 0: no workers, one process
        out = tmp_path / f"threads-{workers}.jsonl"
        done = run_session(
            folder, "-p", "xdist", "-n", workers, "test_threads.py", env={**user, "THREADS_OUT": str(out)}
        )
        assert done.returncode == 0, done.stdout + done.stderr
        shares[workers] = json.loads(out.read_text())
    share = str(max(1, (os.cpu_count() or 1) // 2))
    assert shares["2"] == [share, "7"]  # OMP gets the worker's share, what the user set wins
    assert shares["0"] == [None, "7"]  # one process keeps torch's own default


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


def load_root_conftest():
    import importlib.util

    spec = importlib.util.spec_from_file_location("root_conftest", ROOT_CONFTEST)
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    return conftest


def test_long_files_are_queued_first_and_short_ones_keep_their_place():
    longest_first = load_root_conftest().longest_first
    files = ["a.py", "b.py", "c.py", "d.py", "e.py"]
    seconds = {"a.py": 1.0, "b.py": 40.0, "c.py": 2.0, "d.py": 90.0}  # e.py is new: no time yet
    assert longest_first(files, seconds, integration={"c.py"}) == ["d.py", "b.py", "a.py", "c.py", "e.py"]
    # a fresh clone has no times: the integration files go first, each group in its own order
    assert longest_first(files, {}, integration={"c.py", "e.py"}) == ["c.py", "e.py", "a.py", "b.py", "d.py"]


SHORT_AND_LONG = {
    "test_short.py": "def test_one():\n    pass\n\ndef test_two():\n    pass\n",
    "test_long.py": "def test_one():\n    pass\n",
}


def test_a_run_keeps_each_files_time_and_the_next_collection_starts_with_the_longest(tmp_path):
    folder = scratch(tmp_path, "test_short.py", SHORT_AND_LONG["test_short.py"])
    (folder / "test_long.py").write_text(SHORT_AND_LONG["test_long.py"])
    cached = folder / ".pytest_cache" / "v" / "knowlyr" / "file-seconds"

    def session(*args):
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:randomly", *args],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    session("-q", "test_short.py", "test_long.py")
    assert set(json.loads(cached.read_text())) == {"test_short.py", "test_long.py"}
    cached.write_text(json.dumps({"test_short.py": 6.0, "test_long.py": 60.0}))
    listed = [
        line for line in session("--collect-only", "-q", "test_short.py", "test_long.py").splitlines() if "::" in line
    ]
    assert listed == ["test_long.py::test_one", "test_short.py::test_one", "test_short.py::test_two"]
    session("-q", "test_short.py")  # a run of one file updates its time and keeps the other's
    times = json.loads(cached.read_text())
    assert times["test_long.py"] == 60.0 and times["test_short.py"] < 6.0
