"""Launching an MCP server process: in bubblewrap where it works, else a plain bounded subprocess.

An MCP server is someone else's program driven by a policy's arguments, so it runs like the
local backend's shell (``agentsandbox.backends.local``, whose bwrap command line, pre-exec
limits and seccomp filter this module reuses): its own user, pid, network, ipc and uts
namespaces, read-only system directories and a minimal /etc, a bounded private /tmp, the
cgroup or rlimits of ``memory_mb``, 1024 open files, no core dumps, and as root a private uid.
What it sees of the host beyond that:

- the episode's workspace copy, read-write at ``WORKSPACE_MOUNT`` (``/workspace``), its
  working directory;
- its own install, read-only: the command is looked up on PATH, then in the directories of
  ``$KNOWLYR_MCP_PATH``, symlinks resolved; when the directory above it holds ``pyvenv.cfg``
  the whole virtualenv and the Python it was made from (``home`` in ``pyvenv.cfg``) are bound,
  else the command's own directory;
- ``binds``: extra read-only host paths the caller names.

The environment is exactly ``server_env``: a PATH, ``HOME=/tmp``, git told to trust the
workspace (``safe.directory`` through ``GIT_CONFIG_COUNT``: the copy may be owned by another
uid) and to read no system config, plus the caller's ``env``. Nothing else leaks from the host.

``sandbox="none"`` runs the server as a plain subprocess with the same rlimits and environment
and the workspace as its working directory. **Every host path the calling user can read is then
reachable through the server's tools**: use it only for servers that touch nothing, or where
bubblewrap cannot run.

``ServerSandbox.run`` runs another command (a task's state check) under the same confinement,
so a git hook or ``core.fsmonitor`` the policy planted in the repository never runs on the host.
"""

from __future__ import annotations

import os
import resource
import selectors
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from agentsandbox.backends.base import private_owner, scratch_root
from agentsandbox.backends.cgroups import CgroupUnavailable, SandboxCgroup, cgroup_status
from agentsandbox.backends.local import (
    SandboxLimits,
    bwrap_argv,
    bwrap_status,
    kill_sandbox,
    prepare_scratch,
    process_limit,
    scratch_mode,
    spawn_bwrap,
)
from agentsandbox.config import SandboxConfig
from agentsandbox.workspace import chown_tree
from knowlyrcore.errors import InfrastructureError, InputError

#: Where the episode's workspace copy is mounted inside the sandbox.
WORKSPACE_MOUNT = "/workspace"
SANDBOX_MODES = ("auto", "bwrap", "none")
#: Colon-separated directories searched for a bare server command after PATH.
MCP_PATH_ENV = "KNOWLYR_MCP_PATH"
#: Host directories already visible (read-only) in every sandbox.
_SYSTEM_PREFIXES = ("/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/lib32/", "/libx32/")
_LIMITS = SandboxConfig()  # the local backend's defaults for what the server's config does not set
_SEARCH_PATH = "/usr/local/bin:/usr/bin:/bin"


def resolve_command(name: str) -> str:
    """The absolute path of the server command ``name``: PATH, then ``$KNOWLYR_MCP_PATH``.

    Symlinks are kept: a virtualenv's ``python`` is a symlink to the base interpreter, and only
    its own path tells Python which virtualenv it runs in.
    """
    found = None
    if name:
        found = shutil.which(name) or shutil.which(name, path=os.environ.get(MCP_PATH_ENV, ""))
    if found is None:
        raise InputError(f"MCP server command {name!r} not found on PATH or in ${MCP_PATH_ENV}")
    return os.path.abspath(found)


def install_dirs(executable: str) -> list[str]:
    """The host directories a server installed at ``executable`` needs, read-only.

    For the command's path and the path its symlinks resolve to: a Python entry point in a
    virtualenv (``pyvenv.cfg`` in the directory above it) needs the virtualenv and the Python
    it was built from (``home`` in ``pyvenv.cfg``), any other program its own directory. System
    directories are visible anyway and left out.
    """
    found = []
    for path in dict.fromkeys([executable, os.path.realpath(executable)]):
        bin_dir = os.path.dirname(path)
        cfg = Path(os.path.dirname(bin_dir), "pyvenv.cfg")
        if not cfg.is_file():
            found.append(bin_dir)
            continue
        found.append(str(cfg.parent))
        for line in cfg.read_text(errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                found.append(os.path.dirname(os.path.realpath(value.strip())))
    return [d for d in dict.fromkeys(found) if not (d + "/").startswith(_SYSTEM_PREFIXES) and d != "/"]


def server_env(bin_dirs: list[str], extra: dict[str, str], home: str) -> dict[str, str]:
    """The whole environment of a server (and of its state-check commands).

    Git trusts every repository (the copy may belong to another uid than the server's, and all
    it reaches is the sandbox's own) and commits as ``agent <agent@sandbox>``: the sandbox's uid
    has no passwd entry to take a name from (``USER`` is what GitPython and ``getpass`` read).
    """
    git_config = {"safe.directory": "*", "user.name": "agent", "user.email": "agent@sandbox"}
    env = {
        "PATH": ":".join([*bin_dirs, _SEARCH_PATH]),
        "HOME": home,
        "USER": "agent",
        "LOGNAME": "agent",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_COUNT": str(len(git_config)),
    }
    for index, (key, value) in enumerate(git_config.items()):
        env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = key, value
    return {**env, **extra}


def _bounded_rlimits(memory_mb: int) -> None:
    # pre-exec of a sandbox="none" server: the rlimits the local backend sets, without its namespaces
    mem = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    fsize = _LIMITS.max_file_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def use_bwrap(sandbox: str) -> bool:
    """Whether ``sandbox`` ("auto", "bwrap", "none") means bubblewrap here; "bwrap" without it is an error."""
    if sandbox not in SANDBOX_MODES:
        raise InputError(f"sandbox must be one of {', '.join(SANDBOX_MODES)}, got {sandbox!r}")
    if sandbox == "none":
        return False
    ok, why = bwrap_status()
    if not ok and sandbox == "bwrap":
        raise InfrastructureError(f"sandbox 'bwrap' requested but {why}")
    return ok


class ServerSandbox:
    """A private directory holding one episode's workspace (``workspace``), and the confinement
    the server and its state checks run under. Fill ``workspace``, then ``start`` the server."""

    def __init__(self, *, sandbox: str = "auto", binds: list[str] | None = None, memory_mb: int = 1024) -> None:
        self.bwrap = use_bwrap(sandbox)
        self.memory_mb = memory_mb
        self.binds = [os.path.realpath(b) for b in binds or []]
        for bind in self.binds:
            if not os.path.exists(bind):
                raise InputError(f"bind path {bind!r} does not exist")
        self.owner = private_owner() if self.bwrap else None
        self._tmp = Path(tempfile.mkdtemp(prefix="knowlyr-mcp-", dir=scratch_root(False)))
        self.workspace = self._tmp / "workspace"
        self.workspace.mkdir()
        self._home = self._tmp / "home"  # HOME of a sandbox="none" server; bwrap ones use their /tmp
        self._home.mkdir()
        self._cgroup: SandboxCgroup | None = None
        self._runs: list[tuple[subprocess.Popen, str]] = []
        if self.owner is not None:
            os.chmod(self._tmp, 0o711)  # the sandbox's uid must traverse to its mounts
        if self.bwrap and cgroup_status()[0]:
            try:
                self._cgroup = SandboxCgroup(self._tmp.name, memory_mb=memory_mb, pids=_LIMITS.pids_limit, cpus=1.0)
            except CgroupUnavailable as exc:
                self.close()
                raise InfrastructureError(f"MCP server sandbox cannot get its cgroup: {exc}") from None

    @property
    def workspace_path(self) -> str:
        """The workspace as the server sees it."""
        return WORKSPACE_MOUNT if self.bwrap else str(self.workspace)

    def _install(self, argv: list[str]) -> tuple[list[str], list[str]]:
        """``argv`` with its command resolved, and the directories the command needs."""
        executable = resolve_command(argv[0])
        return [executable, *argv[1:]], install_dirs(executable)

    def spawn(self, argv: list[str], env: dict[str, str], *, stderr: int) -> subprocess.Popen:
        """Start ``argv`` (its command resolved, "{workspace}" already substituted) confined,
        stdin and stdout piped; ``env`` goes over ``server_env``."""
        argv, installs = self._install(argv)
        bin_dirs = [os.path.dirname(argv[0])]
        if self.owner is not None:
            chown_tree(self.workspace, self.owner)
        if not self.bwrap:
            process = subprocess.Popen(
                argv,
                cwd=self.workspace,
                env=server_env(bin_dirs, env, str(self._home)),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                preexec_fn=lambda: _bounded_rlimits(self.memory_mb),
                start_new_session=True,
                close_fds=True,
            )
            self._runs.append((process, ""))
            return process
        scratch = self._tmp / f"scratch-{uuid.uuid4().hex[:12]}"  # its own /tmp, and its kill marker
        prepare_scratch(scratch, self.owner)
        host_dirs = [*installs, *self.binds]
        limits = SandboxLimits(
            owner=self.owner,
            cgroup=self._cgroup,
            memory_mb=self.memory_mb,
            nproc=process_limit(_LIMITS.pids_limit, self.owner),
            max_file_mb=_LIMITS.max_file_mb,
            tmp_mb=_LIMITS.tmp_mb,
            tmp_inodes=_LIMITS.tmp_inodes,
            scratch=os.fsencode(scratch),
            scratch_mode=scratch_mode(),
            host_dirs=tuple(os.fsencode(d) for d in host_dirs),
        )
        mounts = ["--bind", str(self.workspace), WORKSPACE_MOUNT]
        for index, path in enumerate(host_dirs):
            mounts += ["--ro-bind", limits.host_dir(index), path]
        # the marker names this process's scratch in its command line whatever the scratch mode
        mounts += ["--setenv", "KNOWLYR_SANDBOX_SCRATCH", str(scratch)]
        full_env = server_env(bin_dirs, env, "/tmp")

        def command(seccomp_fd: int | None) -> list[str]:
            return bwrap_argv(
                argv,
                network=False,
                tmp_mb=_LIMITS.tmp_mb,
                scratch=scratch,
                mounts=mounts,
                workdir=WORKSPACE_MOUNT,
                seccomp_fd=seccomp_fd,
            )

        process = spawn_bwrap(command, limits, full_env, stderr=stderr)
        self._runs.append((process, str(scratch)))
        return process

    def run(self, argv: list[str], env: dict[str, str], *, timeout: float, max_bytes: int) -> tuple[int | None, str]:
        """Run ``argv`` to its end under the same confinement: (exit code, or None when it ran out
        of ``timeout``; its stdout and stderr, the first ``max_bytes`` of them)."""
        process = self.spawn(argv, env, stderr=subprocess.STDOUT)
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()
        output = bytearray()
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while (left := deadline - time.monotonic()) > 0:
                if not selector.select(left):
                    continue
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    break
                output += chunk[: max(0, max_bytes - len(output))]
        try:
            code: int | None = process.wait(timeout=max(deadline - time.monotonic(), 0.001))
        except subprocess.TimeoutExpired:
            code = None
        self._kill(process)
        return code, output.decode("utf-8", "replace")

    def _kill(self, process: subprocess.Popen) -> None:
        for index, (known, marker) in enumerate(self._runs):
            if known is process:
                del self._runs[index]
                if marker:
                    kill_sandbox(process, marker)
                else:
                    _kill_session(process)
                return

    def kill(self, process: subprocess.Popen) -> None:
        """Kill ``process`` (one ``spawn`` started) and everything it started; wait until they are gone."""
        self._kill(process)

    def close(self) -> None:
        """Kill every process of this sandbox and delete its directory (never raises, never hangs)."""
        for process, _ in list(self._runs):
            self._kill(process)
        if self._cgroup is not None:
            self._cgroup.remove()
            self._cgroup = None
        shutil.rmtree(self._tmp, ignore_errors=True)


def _kill_session(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, 9)
    except ProcessLookupError:
        pass
    process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()
