"""``LocalSandbox``: a daemonless sandbox built on bubblewrap (``bwrap``) and rlimits.

Used when no Docker daemon is reachable. Each shell runs as
``bwrap --unshare-all --die-with-parent ... bash``: new user, pid, network, ipc, uts and
cgroup namespaces (so no network but loopback, and ``kill -9 -1`` reaches only the sandbox),
a root filesystem that holds read-only system directories (``/usr``, a minimal ``/etc``), a
private ``/tmp`` and ``/dev``, the workspace bind-mounted read-write, and nothing else of the
host (no ``/home``, ``/root`` or ``/work``).

Limits come from rlimits set before ``bwrap`` starts, since there are no cgroups to use:
address space (``memory_mb`` per process), file size, open files and processes. The process
limit is counted per user, so when the host runs as root each sandbox gets a private uid —
its fork bomb then cannot exhaust anyone else's process table; as an ordinary user the
limit is ``pids_limit`` above the processes the user already runs. ``cpus`` is not enforced,
and without cgroups nothing caps the workspace's total size (each file: ``max_file_mb``).
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from agentsandbox.backends.base import SNAPSHOT_MOUNT, BackendUnavailable, Sandbox, private_owner
from agentsandbox.shell import PipeTransport, Transport

#: ``--die-with-parent`` is PR_SET_PDEATHSIG, which fires when the *thread* that forked bwrap
#: exits. Forking from one long-lived thread keeps a sandbox alive however short-lived the
#: caller's thread is (worker pools, MCP handlers), and still ends it with the process.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="knowlyr-bwrap-spawner")

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = (
    "passwd", "group", "hosts", "nsswitch.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
    "alternatives", "ssl", "ca-certificates", "localtime", "os-release", "mime.types", "python3",
)  # fmt: skip


def bwrap_status() -> tuple[bool, str]:
    """Whether bubblewrap can create a sandbox here, and why not."""
    path = shutil.which("bwrap")
    if path is None:
        return False, "bwrap not found (apt-get install bubblewrap)"
    probe = subprocess.run(
        [path, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"],
        capture_output=True,
        text=True,
        **_user_kwargs(private_owner()),
    )
    if probe.returncode != 0:
        return False, f"bwrap cannot create namespaces here: {probe.stderr.strip() or probe.returncode}"
    return True, f"bubblewrap at {path}"


def _kill(pid: int) -> None:
    try:
        if pid < 0:
            os.killpg(-pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _processes_of(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                count += os.stat(f"/proc/{entry}").st_uid == uid
            except OSError:
                continue
    return count


def _user_kwargs(owner: tuple[int, int] | None) -> dict:
    if owner is None:
        return {}
    return {"user": owner[0], "group": owner[1], "extra_groups": []}


class LocalSandbox(Sandbox):
    """Runs commands under bubblewrap on this machine; see the module docstring for the containment."""

    backend = "local"

    def _create(self) -> None:
        ok, why = bwrap_status()
        if not ok:
            raise BackendUnavailable(f"local backend unavailable: {why}")
        self._process: subprocess.Popen | None = None

    def _bwrap_argv(self, argv: list[str]) -> list[str]:
        cfg = self.config
        args = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--hostname", "sandbox"]
        if cfg.network:
            args.append("--share-net")
        for path in _SYSTEM_DIRS:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        for name in _ETC_FILES:
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/var/tmp"]
        args += ["--bind", str(self.workspace.root), cfg.workdir]
        args += ["--ro-bind", str(self._snapshot.root), SNAPSHOT_MOUNT]
        args += ["--chdir", cfg.workdir]
        return [*args, "--", *argv]

    def _limits(self) -> None:
        # Runs in the child between fork and exec: only async-signal-safe-ish calls.
        cfg = self.config
        mem = cfg.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_NPROC, (self._nproc, self._nproc))
        fsize = cfg.max_file_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    def _spawn_shell(self, argv: list[str], env: dict[str, str]) -> Transport:
        # RLIMIT_NPROC counts every process of the uid. A private uid (root host) starts at
        # zero; the caller's own uid already runs the caller's processes, so add those.
        self._nproc = self.config.pids_limit + (0 if self._owner() else _processes_of(os.getuid()))
        self._process = _SPAWNER.submit(
            subprocess.Popen,
            self._bwrap_argv(argv),
            # exactly this environment (bwrap passes its own on): nothing leaks from the host
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=self._limits,
            start_new_session=True,
            close_fds=True,
            **_user_kwargs(self._owner()),
        ).result()
        return PipeTransport(self._process)

    def _kill_all(self) -> None:
        # bwrap's inner init is the pid namespace's pid 1: when it dies the kernel kills every
        # process inside. It is not our child, so find it by its command line (which names this
        # sandbox's private directory), kill it, and wait until it is really gone.
        process = getattr(self, "_process", None)
        if process is None:
            return
        for pid in self._namespace_inits():
            _kill(pid)
        _kill(-process.pid)
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
        self._process = None
        deadline = time.monotonic() + 10
        while self._namespace_inits() and time.monotonic() < deadline:
            time.sleep(0.005)  # polling the kernel's process table, not guessing a duration

    def _namespace_inits(self) -> list[int]:
        marker = str(self._tmp).encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if marker in handle.read():
                        found.append(int(entry))
            except OSError:
                continue
        return found

    def _destroy(self) -> None:
        self._kill_all()
