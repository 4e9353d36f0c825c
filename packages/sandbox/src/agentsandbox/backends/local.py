"""``LocalSandbox``: a daemonless sandbox built on bubblewrap (``bwrap``), cgroups and rlimits.

Used when no Docker daemon is reachable. Each shell runs as
``bwrap --unshare-all --die-with-parent ... bash``: new user, pid, network, ipc, uts and
cgroup namespaces (so no network but loopback, and ``kill -9 -1`` reaches only the sandbox),
a read-only root filesystem and ``/dev`` that hold read-only system directories (``/usr``, a
minimal ``/etc``), a bounded scratch space (``/tmp``, ``/var/tmp`` -> ``/tmp``, ``/dev/shm``),
the workspace bind-mounted read-write, and nothing else of the host (no ``/home``, ``/root``
or ``/work``). A seccomp filter (``seccomp.py``) refuses new namespaces — ``unshare -Ur``
would make the agent root of its own namespace — mount, ptrace, keyctl, bpf and the like.

What bounds the host depends on who runs it; ``LocalSandbox.enforced_limits`` says which hold:

- **Memory, processes, CPU.** As root with a writable cgroup hierarchy (``cgroups.py``) the
  sandbox gets a cgroup: ``memory_mb`` (swap included) for all its processes and the tmpfs
  pages they write together, ``pids_limit``, ``cpus``. Otherwise only rlimits hold: address
  space of ``memory_mb`` *per process* (four processes may use four times that),
  ``RLIMIT_NPROC`` (counted per user, so as root each sandbox gets a private uid; as an
  ordinary user the limit is ``pids_limit`` above the processes the user already runs), and
  ``cpus`` is not enforced.
- **Workspace.** On the host's disk, bounded only by ``max_file_mb`` per file. Not in RAM
  even with a cgroup: its pages would stay charged to the cgroup across shell restarts, so a
  full workspace would leave no memory to start the next shell in.
- **Scratch space.** As root, a tmpfs of ``tmp_mb`` and ``tmp_inodes`` mounted in a private
  mount namespace that only this sandbox's bwrap lives in (it vanishes with it) holds /tmp and
  /dev/shm together. Else with bubblewrap >= 0.9, ``--size`` tmpfs mounts of ``tmp_mb`` for
  /tmp and for /dev/shm (no inode limit). Else (an ordinary user with an older bubblewrap)
  they are directories beside the workspace on the host's disk: no host RAM, but no bound
  but the disk's.
- Always: ``max_file_mb`` per file (``RLIMIT_FSIZE``), 1024 open files, no core dumps.
"""

from __future__ import annotations

import ctypes
import functools
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from agentsandbox.backends import seccomp
from agentsandbox.backends.base import SNAPSHOT_MOUNT, BackendUnavailable, Sandbox, SandboxError, private_owner
from agentsandbox.backends.cgroups import CgroupUnavailable, SandboxCgroup, cgroup_status
from agentsandbox.shell import PipeTransport, Transport

#: ``--die-with-parent`` is PR_SET_PDEATHSIG, which fires when the *thread* that forked bwrap
#: exits. Forking from one long-lived thread keeps a sandbox alive however short-lived the
#: caller's thread is (worker pools, MCP handlers), and still ends it with the process.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="knowlyr-bwrap-spawner")

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = (
    "passwd",
    "group",
    "hosts",
    "nsswitch.conf",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl",
    "ca-certificates",
    "localtime",
    "os-release",
    "mime.types",
    "python3",
)

_LIBC = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000


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
        why = " ".join(probe.stderr.split()) or f"exit code {probe.returncode}"
        return (
            False,
            f"bwrap cannot create namespaces here ({why}); python -m agentsandbox.setup_docker, as root, allows them",
        )
    return True, f"bubblewrap at {path}"


@functools.cache
def bwrap_version() -> tuple[int, ...]:
    """bubblewrap's version, e.g. (0, 8, 0); () when it cannot be read."""
    try:
        out = subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.split()
        return tuple(int(part) for part in out[-1].split("."))
    except (OSError, IndexError, ValueError):
        return ()


def _mount_scratch(
    target: bytes, size_mb: int, inodes: int, owner: tuple[int, int], host_dirs: Sequence[bytes] = ()
) -> None:
    """Pre-exec, as root: a private mount namespace with a ``size_mb`` tmpfs at ``target``.

    The tmpfs exists only in this process's namespace (bwrap and the sandbox inherit it) and
    disappears with the last process in it; the host never sees it, so nothing can leak it.
    Each of ``host_dirs`` is bind-mounted at ``target/host<i>``: bwrap, run as the sandbox's
    private uid, can then bind a directory that uid could not reach by its own path (a program
    installed under root's 0700 home).
    """
    for result in (
        _LIBC.unshare(_CLONE_NEWNS),
        # the host's / is usually a shared mount: without this the tmpfs would propagate back
        _LIBC.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None),
        _LIBC.mount(
            b"tmpfs", target, b"tmpfs", _MS_NOSUID | _MS_NODEV, f"size={size_mb}m,nr_inodes={inodes},mode=0755".encode()
        ),
    ):
        if result != 0:
            raise OSError(ctypes.get_errno(), "cannot mount the sandbox's scratch tmpfs")
    for sub in (b"tmp", b"shm"):
        path = target + b"/" + sub
        os.mkdir(path)
        os.chown(path, *owner)
        os.chmod(path, 0o1777)
    for index, source in enumerate(host_dirs):
        path = target + b"/host%d" % index
        os.mkdir(path)
        if _LIBC.mount(source, path, None, _MS_BIND | _MS_REC, None) != 0:
            raise OSError(ctypes.get_errno(), "cannot bind a host directory into the sandbox's scratch")


@functools.cache
def scratch_mode() -> str:
    """How this host bounds a sandbox's /tmp and /dev/shm: "tmpfs", "size" or "disk" (module docstring)."""
    owner = private_owner()
    if owner is not None:
        with tempfile.TemporaryDirectory(prefix="knowlyr-probe-") as probe:
            try:
                subprocess.run(
                    ["true"], preexec_fn=lambda: _mount_scratch(os.fsencode(probe), 1, 16, owner), check=True
                )
                return "tmpfs"
            except (OSError, subprocess.SubprocessError):
                pass
    return "size" if bwrap_version() >= (0, 9) else "disk"


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


def prepare_scratch(scratch: Path, owner: tuple[int, int] | None) -> None:
    """Create ``scratch``, the directory a sandbox's /tmp and /dev/shm come from (``scratch_mode``)."""
    scratch.mkdir()
    if scratch_mode() == "disk":
        for sub in ("tmp", "shm"):
            (scratch / sub).mkdir(mode=0o1777)
            os.chmod(scratch / sub, 0o1777)
            if owner is not None:
                os.chown(scratch / sub, *owner)


def bwrap_argv(
    argv: Sequence[str],
    *,
    network: bool,
    tmp_mb: int,
    scratch: Path,
    mounts: Sequence[str],
    workdir: str,
    seccomp_fd: int | None,
) -> list[str]:
    """The bubblewrap command line running ``argv`` in a sandbox as the module docstring describes:
    read-only system directories and a minimal /etc, /tmp and /dev/shm from ``scratch``, then
    ``mounts`` (bwrap options: the workspace and whatever else this sandbox may see)."""
    args = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if network:
        args.append("--share-net")
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for name in _ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    if scratch_mode() == "size":
        size = str(tmp_mb * 1024 * 1024)
        args += ["--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", "/dev/shm"]
    else:
        args += ["--bind", str(scratch / "tmp"), "/tmp", "--bind", str(scratch / "shm"), "/dev/shm"]
    args += ["--symlink", "../tmp", "/var/tmp", *mounts]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    # bwrap's own / and /dev are unbounded tmpfs mounts: nothing inside may write to them
    # (not recursive: the mounts above stay writable)
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    args += ["--chdir", workdir]
    return [*args, "--", *argv]


@dataclass(frozen=True)
class SandboxLimits:
    """What bounds a sandbox's processes, applied by ``enter`` between fork and exec of bwrap.

    ``nproc`` is the ``RLIMIT_NPROC`` to set: the caller adds the processes its own uid already
    runs when there is no private ``owner`` (``process_limit``). ``host_dirs`` are bound into the
    scratch tmpfs while still root (``_mount_scratch``; ``host_dir`` says where).
    """

    owner: tuple[int, int] | None
    cgroup: SandboxCgroup | None
    memory_mb: int
    nproc: int
    max_file_mb: int
    tmp_mb: int
    tmp_inodes: int
    scratch: bytes
    scratch_mode: str
    host_dirs: tuple[bytes, ...] = ()

    def enter(self) -> None:
        # Runs in the child between fork and exec, as the caller: join the cgroup and mount the
        # scratch tmpfs while still root, then drop to the sandbox's uid and set the rlimits.
        owner = self.owner
        if self.cgroup is not None:
            self.cgroup.join()
        if owner is not None:
            if self.scratch_mode == "tmpfs":
                _mount_scratch(self.scratch, self.tmp_mb, self.tmp_inodes, owner, self.host_dirs)
            os.setgroups([])
            os.setresgid(owner[1], owner[1], owner[1])
            os.setresuid(owner[0], owner[0], owner[0])
        if self.cgroup is None:
            mem = self.memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_NPROC, (self.nproc, self.nproc))
        fsize = self.max_file_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    def host_dir(self, index: int) -> str:
        """Where bwrap finds ``host_dirs[index]``: its bind in the scratch tmpfs when ``enter``
        mounts one (a private uid), else the path itself."""
        if self.owner is not None and self.scratch_mode == "tmpfs":
            return os.fsdecode(self.scratch + b"/host%d" % index)
        return os.fsdecode(self.host_dirs[index])


def process_limit(pids_limit: int, owner: tuple[int, int] | None) -> int:
    """The ``RLIMIT_NPROC`` giving a sandbox ``pids_limit`` processes. RLIMIT_NPROC counts every
    process of the uid: a private uid (root host) starts at zero; the caller's own uid already
    runs the caller's processes, so add those."""
    return pids_limit + (0 if owner else _processes_of(os.getuid()))


def spawn_bwrap(
    command: Callable[[int | None], list[str]], limits: SandboxLimits, env: dict[str, str], *, stderr: int
) -> subprocess.Popen:
    """Start ``command(seccomp_fd)`` (a ``bwrap_argv``) under ``limits``, with exactly ``env``
    (bwrap passes its own on: nothing leaks from the host), stdin and stdout piped, from the
    spawner thread (``_SPAWNER``), in a new session."""
    program = seccomp.filter_program()
    seccomp_fd = None
    if program is not None:
        # bwrap reads the filter from this fd up to EOF; it fits in the pipe's buffer
        seccomp_fd, writer = os.pipe()
        os.write(writer, program)
        os.close(writer)
    try:
        return _SPAWNER.submit(
            subprocess.Popen,
            command(seccomp_fd),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            preexec_fn=limits.enter,
            start_new_session=True,
            close_fds=True,
            pass_fds=() if seccomp_fd is None else (seccomp_fd,),
        ).result()
    finally:
        if seccomp_fd is not None:
            os.close(seccomp_fd)


def namespace_inits(marker: str) -> list[int]:
    """The pids of processes whose command line holds ``marker`` (a sandbox's private directory):
    bwrap's inner init, pid 1 of the sandbox's pid namespace, is not the caller's child."""
    needle = marker.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if needle in handle.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def kill_sandbox(process: subprocess.Popen, marker: str) -> None:
    """Kill a sandbox started by ``spawn_bwrap`` and wait until every process in it is gone.

    When the namespace's init dies the kernel kills every process inside; find it by ``marker``
    (``namespace_inits``), kill it and the session of ``process``, and wait for the kernel.
    """
    for pid in namespace_inits(marker):
        _kill(pid)
    _kill(-process.pid)
    process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()
    deadline = time.monotonic() + 10
    while namespace_inits(marker) and time.monotonic() < deadline:
        time.sleep(0.005)  # polling the kernel's process table, not guessing a duration


class LocalSandbox(Sandbox):
    """Runs commands under bubblewrap on this machine; see the module docstring for the containment."""

    backend = "local"
    _cgroup: SandboxCgroup | None = None

    def _create(self) -> None:
        ok, why = bwrap_status()
        if not ok:
            raise BackendUnavailable(f"local backend unavailable: {why}")
        self._process: subprocess.Popen | None = None
        self._scratch = self._tmp / "scratch"
        prepare_scratch(self._scratch, self._owner())
        if cgroup_status()[0]:
            cfg = self.config
            try:
                self._cgroup = SandboxCgroup(
                    self._tmp.name, memory_mb=cfg.memory_mb, pids=cfg.pids_limit, cpus=cfg.cpus
                )
            except CgroupUnavailable as exc:
                raise SandboxError(f"local sandbox cannot get its cgroup: {exc}") from None

    @property
    def enforced_limits(self) -> dict[str, str]:
        """What bounds this sandbox on this host, per resource (see the module docstring)."""
        cfg, cgroup = self.config, self._cgroup
        mode = scratch_mode()
        if cgroup is not None:
            swap = "swap included" if cgroup.swap_counted else "swap not accounted on this host"
            memory = f"cgroup v{cgroup.version}: {cfg.memory_mb} MiB for all processes and tmpfs pages together, {swap}"
            processes = f"cgroup v{cgroup.version}: {cfg.pids_limit} processes and threads"
            cpus = f"cgroup v{cgroup.version}: {cfg.cpus:g} CPUs" if "cpu" in cgroup.controllers else "not enforced"
        else:
            why = cgroup_status()[1]
            memory = f"RLIMIT_AS: {cfg.memory_mb} MiB per process, not in total (no cgroup: {why})"
            processes = f"RLIMIT_NPROC: {cfg.pids_limit}" + ("" if self._owner() else " above the user's own processes")
            cpus = "not enforced (no cgroup)"
        tmp = {
            "tmpfs": f"one tmpfs of {cfg.tmp_mb} MiB and {cfg.tmp_inodes} inodes for /tmp, /var/tmp and /dev/shm",
            "size": f"tmpfs of {cfg.tmp_mb} MiB each for /tmp (and /var/tmp) and /dev/shm, no inode limit",
            "disk": f"directories on the host disk (bubblewrap {'.'.join(map(str, bwrap_version()))} < 0.9 "
            "has no --size and only root can mount a sized tmpfs)",
        }[mode]
        return {
            "memory": memory,
            "processes": processes,
            "cpus": cpus,
            "tmp": tmp,
            "workspace": f"on the host disk: only max_file_mb ({cfg.max_file_mb} MiB) per file",
            "file_size": f"RLIMIT_FSIZE: {cfg.max_file_mb} MiB per file",
            "syscalls": seccomp.describe(),
            "root_filesystem": "read-only (/ and /dev)",
        }

    def _bwrap_argv(self, argv: list[str], seccomp_fd: int | None) -> list[str]:
        cfg = self.config
        mounts = [
            "--bind",
            str(self.workspace.root),
            cfg.workdir,
            "--ro-bind",
            str(self._snapshot.root),
            SNAPSHOT_MOUNT,
        ]
        return bwrap_argv(
            argv,
            network=cfg.network,
            tmp_mb=cfg.tmp_mb,
            scratch=self._scratch,
            mounts=mounts,
            workdir=cfg.workdir,
            seccomp_fd=seccomp_fd,
        )

    def _spawn_shell(self, argv: list[str], env: dict[str, str]) -> Transport:
        cfg, owner = self.config, self._owner()
        # computed here: the pre-exec hook should do as little as it can
        limits = SandboxLimits(
            owner=owner,
            cgroup=self._cgroup,
            memory_mb=cfg.memory_mb,
            nproc=process_limit(cfg.pids_limit, owner),
            max_file_mb=cfg.max_file_mb,
            tmp_mb=cfg.tmp_mb,
            tmp_inodes=cfg.tmp_inodes,
            scratch=os.fsencode(self._scratch),
            scratch_mode=scratch_mode(),
        )
        self._process = spawn_bwrap(
            lambda seccomp_fd: self._bwrap_argv(argv, seccomp_fd), limits, env, stderr=subprocess.STDOUT
        )
        return PipeTransport(self._process)

    def _kill_all(self) -> None:
        process = getattr(self, "_process", None)
        if process is None:
            return
        kill_sandbox(process, str(self._tmp))
        self._process = None

    def _destroy(self) -> None:
        self._kill_all()
        if self._cgroup is not None:
            self._cgroup.remove()
            self._cgroup = None
