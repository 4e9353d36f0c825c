"""Test isolation for the whole monorepo: a test's outcome must not depend on which tests ran before it.

Loaded for every test under ``packages/`` and ``tests/`` (this is the rootdir's conftest), also in
the per-package isolated runs, so it imports only the standard library; torch and numpy are
touched only when a test already imported them.

- **Random state.** Before each test's setup (its fixtures included, even session-scoped ones it
  is the first to use), Python's, NumPy's and torch's global generators are seeded from the test's
  own id. Every test sees the same random stream whatever ran before it, in any order.
- **Process-wide settings.** Environment variables, the working directory, the socket default
  timeout and torch's global switches (default dtype, grad mode, thread count, deterministic
  algorithms, matmul precision) are read before a test and after its teardown. A test that changes
  one and does not put it back fails with the list of what it left changed, and the setting is
  restored so the tests after it still run in a clean process. Session-scoped fixtures (a daemon,
  a served model) are exempt while they live: what they set is part of the session they build.

It also says where the published real agent logs are: ``KNOWLYR_REAL_DATA`` (which
``knowlyrcore.testing.real_data`` reads) defaults to ``shared/data/real`` beside this clone.
"""

from __future__ import annotations

import os
import random
import socket
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

_SNAPSHOT = pytest.StashKey[dict[str, Any]]()
#: Variables libraries set for themselves on first import or use; they change no test's outcome.
#: (gymnasium writes PYGAME_HIDE_SUPPORT_PROMPT the first time anything imports it.)
_ENV_IGNORED = frozenset(
    {
        "KMP_DUPLICATE_LIB_OK",
        "KMP_INIT_AT_FORK",
        "TOKENIZERS_PARALLELISM",
        "PYTEST_CURRENT_TEST",
        "PYGAME_HIDE_SUPPORT_PROMPT",
    }
)
_ENV_IGNORED_PREFIXES = ("RAY_", "COV_CORE_", "TORCHINDUCTOR_", "TRITON_", "WANDB_SERVICE")


#: Set before any test runs; ``knowlyrcore.testing.real_data`` reads it. The default is found
#: from this file because knowlyrcore may be installed in site-packages (the isolated per-package
#: runs), from where the clone cannot be found; a worktree elsewhere sets the variable.
REAL_DATA_ENV_VAR = "KNOWLYR_REAL_DATA"
#: Where knowlyr/mcp finds a server command that is not on PATH; ``make install`` puts the
#: published MCP servers the tests act through in venvs beside this file (git and time on mcp 2.x,
#: sqlite on mcp 1.x: see the Makefile).
MCP_PATH_ENV_VAR = "KNOWLYR_MCP_PATH"
MCP_VENVS = (".venv-mcp", ".venv-mcp-sqlite")


def pytest_configure(config: pytest.Config) -> None:
    default = Path(__file__).resolve().parent.parent / "shared" / "data" / "real"
    os.environ[REAL_DATA_ENV_VAR] = str(Path(os.environ.get(REAL_DATA_ENV_VAR) or default).resolve())
    here = Path(__file__).resolve().parent
    os.environ.setdefault(MCP_PATH_ENV_VAR, os.pathsep.join(str(here / v / "bin") for v in MCP_VENVS))
    share_cores_between_workers(config)
    config.pluginmanager.register(LongestFilesFirst(config), "knowlyr-longest-files-first")


def _seed_for(nodeid: str) -> int:
    return zlib.crc32(nodeid.encode())


def seed_global_generators(seed: int) -> None:
    """Seed every global random generator a test could draw from (those already imported)."""
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed)
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "manual_seed"):
        torch.manual_seed(seed)


def _torch_settings() -> dict[str, Any]:
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "get_default_dtype"):
        return {}
    return {
        "torch.default_dtype": torch.get_default_dtype(),
        "torch.grad_enabled": torch.is_grad_enabled(),
        "torch.num_threads": torch.get_num_threads(),
        "torch.deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "torch.float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def _restore_torch(name: str, value: Any) -> None:
    import torch

    setter = {
        "torch.default_dtype": torch.set_default_dtype,
        "torch.grad_enabled": torch.set_grad_enabled,
        "torch.num_threads": torch.set_num_threads,
        "torch.deterministic_algorithms": torch.use_deterministic_algorithms,
        "torch.float32_matmul_precision": torch.set_float32_matmul_precision,
    }[name]
    setter(value)


def _tracked_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _ENV_IGNORED and not k.startswith(_ENV_IGNORED_PREFIXES)}


def _snapshot() -> dict[str, Any]:
    return {
        "env": _tracked_env(),
        "cwd": os.getcwd(),
        "socket_timeout": socket.getdefaulttimeout(),
        **_torch_settings(),
    }


#: Environment variables a session-, package- or module-scoped fixture set or removed: they are
#: that fixture's to own for its lifetime (a daemon's socket path, say), not a test's leak.
_FIXTURE_OWNED_ENV: set[str] = set()


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest):
    if fixturedef.scope == "function":
        yield
        return
    before = _tracked_env()
    yield
    after = _tracked_env()
    _FIXTURE_OWNED_ENV.update(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def _restore(before: dict[str, Any]) -> list[str]:
    """Put every changed setting back; return one description per change."""
    changed: list[str] = []
    after = _snapshot()
    old_env, new_env = before["env"], after["env"]
    for key in sorted(set(old_env) | set(new_env)):
        if old_env.get(key) != new_env.get(key) and key not in _FIXTURE_OWNED_ENV:
            changed.append(f"environment variable {key}: {old_env.get(key)!r} -> {new_env.get(key)!r}")
            if key in old_env:
                os.environ[key] = old_env[key]
            else:
                os.environ.pop(key, None)
    if after["cwd"] != before["cwd"]:
        changed.append(f"working directory: {before['cwd']} -> {after['cwd']}")
        os.chdir(before["cwd"])
    if after["socket_timeout"] != before["socket_timeout"]:
        changed.append(f"socket default timeout: {before['socket_timeout']} -> {after['socket_timeout']}")
        socket.setdefaulttimeout(before["socket_timeout"])
    for name, value in before.items():
        if name.startswith("torch.") and after.get(name) != value:
            changed.append(f"{name}: {value} -> {after.get(name)}")
            _restore_torch(name, value)
    return changed


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_SNAPSHOT] = _snapshot()
    seed_global_generators(_seed_for(item.nodeid))


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    yield
    before = item.stash.get(_SNAPSHOT, None)
    if before is None:
        return
    changed = _restore(before)
    if changed:
        raise AssertionError(f"{item.nodeid} left process-wide state changed: " + "; ".join(changed))


#: Variables that size the thread pools of torch (OpenMP, MKL) and of the libraries tests start.
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def threads_per_worker(cpus: int | None, workers: int) -> int:
    """Cores each of ``workers`` parallel test processes gets (at least one)."""
    return max(1, (cpus or 1) // max(1, workers))


def share_cores_between_workers(config: pytest.Config) -> None:
    """Under pytest-xdist each worker gets its share of the cores for torch's thread pools.

    Two workers that each start one thread per core oversubscribe the machine: OpenMP threads
    spin waiting for siblings that are descheduled, and a matmul-heavy test runs slower than it
    would alone. The variables are set before anything imports torch (collection comes later),
    are inherited by the CLIs tests start, and a value the user set is kept.
    """
    # ``workerinput`` exists only in an xdist worker of this session (the variable
    # PYTEST_XDIST_WORKER_COUNT is inherited by any pytest a test starts, so it cannot tell).
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    if workers < 2:
        return
    share = str(threads_per_worker(os.cpu_count(), workers))
    for name in _THREAD_VARS:
        os.environ.setdefault(name, share)


# --- Longest test files first --------------------------------------------------------------------
# ``make test`` hands whole files to the workers (--dist loadfile) from one queue. A long file that
# starts last keeps one worker busy while the others sit idle, so the queue starts with the files
# that took longest the last time (kept in pytest's cache), or, on a fresh clone, with the
# integration files; the rest keep the order they were collected in (shuffled under
# TEST_ORDER_SEED), so the order still varies where little time is at stake.

#: Files that took at least this long are queued by their time; shorter ones keep their place.
LONG_FILE_SECONDS = 5.0


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def longest_first(files: list[str], seconds: dict[str, float], integration: set[str]) -> list[str]:
    """``files`` reordered: those known to take ``LONG_FILE_SECONDS`` or more first, longest
    first; with no times known, the ``integration`` files first. Otherwise the order is kept."""
    if seconds:
        long = sorted((f for f in files if seconds.get(f, 0.0) >= LONG_FILE_SECONDS), key=lambda f: -seconds[f])
    else:
        long = [f for f in files if f in integration]
    chosen = set(long)
    return long + [f for f in files if f not in chosen]


class LongestFilesFirst:
    """Queues long test files first and keeps each file's time for the next run."""

    CACHE_KEY = "knowlyr/file-seconds"

    def __init__(self, config: pytest.Config):
        self.config = config
        self.cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
        self.spent: dict[str, float] = {}

    @pytest.hookimpl(trylast=True)  # after pytest-random-order has shuffled the items
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        seconds = self.cache.get(self.CACHE_KEY, {}) if self.cache is not None else {}
        by_file: dict[str, list[pytest.Item]] = {}
        for item in items:
            by_file.setdefault(file_of(item.nodeid), []).append(item)
        integration = {f for f, its in by_file.items() if any(i.get_closest_marker("integration") for i in its)}
        items[:] = [item for f in longest_first(list(by_file), seconds, integration) for item in by_file[f]]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # the workers' reports reach the controller too: it alone records (workers have workerinput)
        if not hasattr(self.config, "workerinput"):
            name = file_of(report.nodeid)
            self.spent[name] = self.spent.get(name, 0.0) + report.duration

    def pytest_sessionfinish(self) -> None:
        if self.cache is not None and self.spent:
            # a run of a few files updates their times and keeps the others'
            times = {**self.cache.get(self.CACHE_KEY, {}), **{f: round(s, 1) for f, s in self.spent.items()}}
            self.cache.set(self.CACHE_KEY, times)
