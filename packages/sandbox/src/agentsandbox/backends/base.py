"""``Sandbox``: the protocol every backend implements, and the behaviour they all share.

A sandbox is a contained place to run an agent's commands: a workspace directory (a host
directory mounted at ``config.workdir``), a persistent shell, resource limits and no network
by default. A backend supplies four primitives — create the container/namespace, spawn a
shell process and hand back its byte stream, kill every process inside, destroy — and this
class builds the public operations on them:

- ``run`` / ``run_argv``: one command through the persistent shell, with a timeout that kills
  it (and restarts the shell in the same directory) and an output cap;
- ``read_file`` / ``write_file`` / ``upload`` / ``download``: host-side, symlink-safe access to
  the workspace (see ``workspace.py``), never through a shell;
- ``load`` / ``snapshot`` / ``reset``: set the initial state of the workspace and return to it
  cheaply (an in-shell ``kill -9 -1`` sweep, the old files renamed aside and deleted in the
  background, a copy of the snapshot, ``exec bash``; no new container).

Every live sandbox is closed at interpreter exit.
"""

from __future__ import annotations

import atexit
import errno
import itertools
import os
import shutil
import subprocess
import tempfile
import uuid
import weakref
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

from agentsandbox.config import CLEAN_HOME, SandboxConfig, check_timeout
from agentsandbox.shell import BOOT, DRIVER, WIPE_SCRATCH, PersistentShell, ShellOutput, Transport, reset_script
from agentsandbox.workspace import Workspace, chown_tree
from knowlyrcore.errors import InfrastructureError
from knowlyrcore.models import ToolResult

#: Where the read-only snapshot of the initial workspace is mounted inside every sandbox.
SNAPSHOT_MOUNT = "/.knowlyr/snapshot"
#: Exit code reported for a command killed by its timeout (as coreutils ``timeout`` does).
TIMEOUT_EXIT_CODE = 124
#: How long a new sandbox's shell may take to greet. About a second when the machine is idle; a
#: container start on a saturated 2-core machine (tests, training and dockerd at once) took over 30 s.
STARTUP_TIMEOUT = 60.0
#: Spawns of the shell tried before the sandbox is given up as broken.
STARTUP_ATTEMPTS = 2
RESET_TIMEOUT = 30.0
TEMP_PREFIX = "knowlyr-sandbox-"
#: In-shell sweep before a reset: every process but the shell, repeated while anything is left
#: to signal (a fork bomb forks while a sweep runs).
KILL_SWEEP = "for __k_i in {1..50}; do builtin kill -9 -1 2>/dev/null || break; done"
_TRASH = ThreadPoolExecutor(max_workers=1, thread_name_prefix="knowlyr-sandbox-trash")


#: First uid handed to sandboxes when the host runs as root (far from real accounts).
PRIVATE_UID_BASE = 200_000
_uid_counter = itertools.count()


def private_owner() -> tuple[int, int] | None:
    """A fresh (uid, gid) for a sandbox when the host runs as root, else None (run as the caller).

    Nothing in a sandbox runs as root, and each sandbox's processes are counted under their
    own uid, so one sandbox's fork bomb cannot exhaust another's process limit.
    """
    if os.geteuid() != 0:
        return None
    uid = PRIVATE_UID_BASE + (os.getpid() % 10_000) * 100 + next(_uid_counter) % 100
    return uid, uid


def scratch_roots() -> list[str]:
    """Where sandbox directories may live: ``$KNOWLYR_SANDBOX_TMPDIR``, /dev/shm, the temp dir."""
    roots = [os.environ.get("KNOWLYR_SANDBOX_TMPDIR", ""), "/dev/shm", tempfile.gettempdir()]
    return [r for r in dict.fromkeys(roots) if r and os.path.isdir(r)]


def scratch_root(memory: bool) -> str:
    """The directory new sandboxes are created in.

    ``memory=True`` (Docker) prefers the RAM-backed /dev/shm: a reset deletes and recopies the
    workspace, and on a virtual disk unlinking a small git checkout alone takes ~50 ms, on
    tmpfs ~1 ms. That is safe only where the pages a sandbox writes are charged to its memory
    cgroup (Docker), which bounds them by ``memory_mb``; the local backend has no cgroup, so
    its workspaces stay on disk. ``$KNOWLYR_SANDBOX_TMPDIR`` overrides both.
    """
    override = os.environ.get("KNOWLYR_SANDBOX_TMPDIR")
    if override and os.path.isdir(override):
        return override
    if memory and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


def _mount_bounded_tmpfs(directory: Path, config: SandboxConfig) -> bool:
    """Make ``directory`` (in RAM-backed /dev/shm) a tmpfs of its own with size and inode limits.

    A workspace in the host's /dev/shm is bounded in bytes by the container's memory cgroup
    but not in files: one sandbox could take a third of the host's /dev/shm inodes. Its own
    tmpfs caps both (``workspace_inodes`` files, twice ``memory_mb`` for workspace and
    snapshot). Needs root; elsewhere the workspace stays a plain directory (and
    ``enforced_limits`` of the Docker backend says so).
    """
    if os.geteuid() != 0 or not str(directory).startswith("/dev/shm/") or shutil.which("mount") is None:
        return False
    options = f"size={2 * config.memory_mb + 64}m,nr_inodes={config.workspace_inodes},mode=0711"
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "knowlyr-sandbox", str(directory)], capture_output=True, text=True
    )
    return done.returncode == 0


def unmount(directory: str | os.PathLike) -> None:
    """Detach a sandbox's own tmpfs (lazily: a dying container may still hold it for a moment)."""
    if os.path.ismount(directory):
        subprocess.run(["umount", "-l", str(directory)], capture_output=True)


class SandboxError(InfrastructureError):
    """The sandbox could not be created, reset or reached."""


class BackendUnavailable(SandboxError):
    """The backend cannot run on this machine (no daemon, no image, no bubblewrap)."""


_LIVE: weakref.WeakSet[Sandbox] = weakref.WeakSet()


@atexit.register
def _close_live_sandboxes() -> None:
    for sandbox in list(_LIVE):
        try:
            sandbox.close()
        except Exception:  # interpreter is exiting; gc cleans what is left
            pass


class Sandbox(ABC):
    """A contained workspace with a persistent shell. Use as a context manager.

    Example:
        >>> from agentsandbox import make_sandbox
        >>> with make_sandbox() as sb:  # doctest: +SKIP
        ...     sb.run("cd /tmp && export X=1")
        ...     sb.run("echo $X $PWD").output
        '1 /tmp\\n'
    """

    #: Backend name as used by ``make_sandbox(backend=...)`` and the CLI.
    backend: ClassVar[str]
    #: Whether the workspace may live in RAM (only where a cgroup charges it to the sandbox).
    memory_backed_workspace: ClassVar[bool] = False

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig()
        self._tmp = Path(
            tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", dir=scratch_root(self.memory_backed_workspace))
        )
        self._own_mount = self.memory_backed_workspace and _mount_bounded_tmpfs(self._tmp, self.config)
        (self._tmp / "workspace").mkdir()
        (self._tmp / "snapshot").mkdir()
        owner = self._owner()
        if owner is not None:
            # The sandbox user must traverse the (otherwise private) temp dir to its mounts.
            os.chmod(self._tmp, 0o711)
            for sub in ("workspace", "snapshot"):
                os.chown(self._tmp / sub, *owner)
        self.workspace = Workspace(self._tmp / "workspace", self.config.workdir, owner)
        self._snapshot = Workspace(self._tmp / "snapshot", SNAPSHOT_MOUNT, owner)
        self._shell: PersistentShell | None = None
        self._created = False
        self._closed = False
        _LIVE.add(self)

    # -- backend primitives --------------------------------------------------------------
    @abstractmethod
    def _create(self) -> None:
        """Create the container / check the tools; called once, before the first shell."""

    @abstractmethod
    def _spawn_shell(self, argv: list[str], env: dict[str, str]) -> Transport:
        """Start ``argv`` inside the sandbox in ``workdir`` with exactly ``env``; return its stream."""

    @abstractmethod
    def _kill_all(self) -> None:
        """Kill every process in the sandbox, including the shell (used after a timeout)."""

    @abstractmethod
    def _destroy(self) -> None:
        """Remove the container / processes. Must be safe when ``_create`` never ran."""

    def _owner(self) -> tuple[int, int] | None:
        """(uid, gid) the sandbox runs as when it differs from the host process's."""
        if not hasattr(self, "_uid"):
            self._uid = private_owner()
        return self._uid

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def host_workspace(self) -> Path:
        """The host directory mounted as the workspace."""
        return self.workspace.root

    def start(self) -> None:
        """Create the sandbox and its shell (idempotent; every operation calls it)."""
        if self._closed:
            raise SandboxError("this sandbox is closed")
        if not self._created:
            self._create()
            self._created = True
        if self._shell is None:
            self._start_shell()

    def _start_shell(self, cwd: str | None = None, env: dict[str, str] | None = None) -> None:
        greeting = PersistentShell.new_nonce()
        base_env = self.config.shell_env() if env is None else env
        shell_env = dict(base_env)
        shell_env.update(
            KNOWLYR_GREETING=greeting,
            KNOWLYR_RESET=reset_script(self.config.workdir, SNAPSHOT_MOUNT, base_env),
            KNOWLYR_DRIVER_TEXT=DRIVER,
            KNOWLYR_BOOT=BOOT,
        )
        # A spawn can hang without a word (a `docker exec` seen stuck under load in CI while the next
        # one started at once): one more attempt before the sandbox is given up as broken.
        for attempt in range(1, STARTUP_ATTEMPTS + 1):
            transport = self._spawn_shell(["bash", "--noprofile", "--norc", "-c", BOOT], shell_env)
            shell = PersistentShell(
                transport,
                greeting,
                max_output_bytes=self.config.max_output_bytes,
                overflow_bytes=self.config.overflow_bytes,
            )
            ready = shell.wait_ready(STARTUP_TIMEOUT)
            if ready.exit_code is not None:
                break
            shell.close()
            if attempt == STARTUP_ATTEMPTS:
                raise SandboxError(
                    f"{self.backend} sandbox shell did not start ({STARTUP_ATTEMPTS} attempts): "
                    f"{ready.output.strip() or 'no output'}"
                )
        self._shell = shell
        if cwd and cwd != ready.cwd:
            shell.run_argv(["cd", cwd], STARTUP_TIMEOUT)

    def close(self) -> None:
        """Kill everything, remove the container and the temporary workspace. Idempotent."""
        if self._closed:
            return
        self._closed = True
        _LIVE.discard(self)
        if self._shell is not None:
            self._shell.close()
            self._shell = None
        try:
            self._destroy()
        finally:
            if getattr(self, "_own_mount", False):
                unmount(self._tmp)
            shutil.rmtree(self._tmp, onerror=_force_remove)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self):
        # Last resort when the owner forgot close(); atexit and `knowlyr-sandbox gc` also clean.
        if not getattr(self, "_closed", True):
            try:
                self.close()
            except Exception:
                pass

    # -- commands ------------------------------------------------------------------------
    def run(self, command: str, *, timeout: float | None = None) -> ToolResult:
        """Run ``command`` in the persistent shell (cwd and exported variables carry over)."""
        if "\x00" in command:
            return ToolResult(error="a command cannot contain NUL bytes")
        self.start()
        return self._finish(self._shell.run(command, self._timeout(timeout)), timeout)

    def run_argv(self, argv: list[str], *, timeout: float | None = None) -> ToolResult:
        """Run a program with exactly these arguments: no shell parses them (no injection)."""
        if not argv or any("\x00" in a for a in argv):
            return ToolResult(error="argv must be non-empty and contain no NUL bytes")
        self.start()
        return self._finish(self._shell.run_argv(list(argv), self._timeout(timeout)), timeout)

    def _timeout(self, timeout: float | None) -> float:
        return self.config.timeout if timeout is None else check_timeout(timeout)

    def run_clean(self, command: str, *, timeout: float | None = None, restore: list[str] = ()) -> ToolResult:
        """Run ``command`` with nothing of the episode alive: the verdict a reward can rest on.

        Every process in the sandbox is killed first (background jobs included, so none can
        print into this command's output or forge its end), the scratch directories are
        emptied, and the command runs in a new shell in ``workdir`` with ``clean_env``: no user
        site-packages, no user or system git config, an empty ``HOME``. Only the workspace
        carries over, except ``restore``: paths put back as the snapshot has them once nothing
        can race the copy (the task's own tests, so editing them cannot make them pass). The
        next ``run`` gets a fresh shell too.
        """
        if "\x00" in command:
            return ToolResult(error="a command cannot contain NUL bytes")
        self.start()
        self._shell.close()
        self._shell = None
        self._kill_all()
        self.restore(list(restore))
        self._start_shell(self.config.workdir, env=self.config.clean_env())
        self._shell.run(WIPE_SCRATCH + "true", RESET_TIMEOUT)
        self._shell.run_argv(["mkdir", "-p", CLEAN_HOME], RESET_TIMEOUT)
        result = self._finish(self._shell.run(command, self._timeout(timeout)), timeout)
        # The agent's next command must not inherit the clean environment's shell state.
        self._restart(self.config.workdir)
        return result

    def _finish(self, out: ShellOutput, timeout: float | None) -> ToolResult:
        meta = {"cwd": out.cwd} if out.cwd else {}
        if out.exit_code is not None:
            error = None
            if out.truncated:
                meta["note"] = f"output truncated to {self.config.max_output_bytes} bytes"
            return ToolResult(
                output=out.output, exit_code=out.exit_code, error=error, truncated=out.truncated, metadata=meta
            )
        cwd = self._shell.cwd if self._shell else None
        if out.timed_out:
            why = f"command timed out after {self._timeout(timeout):g}s and was killed"
            code: int | None = TIMEOUT_EXIT_CODE
        elif out.overflowed:
            why = f"command produced more than {self.config.overflow_bytes} bytes of output and was killed"
            code = None
        else:
            why = "the shell exited (the command ended it or it was killed)"
            code = None
        self._restart(cwd)
        where = f" in {cwd}" if cwd else ""
        error = f"{why}; a fresh shell was started{where} (environment variables and background jobs are gone)"
        return ToolResult(output=out.output, exit_code=code, error=error, truncated=out.truncated, metadata=meta)

    def _restart(self, cwd: str | None) -> None:
        if self._shell is not None:
            self._shell.close()
            self._shell = None
        self._kill_all()
        self._start_shell(cwd)

    # -- state ---------------------------------------------------------------------------
    def load(self, source: str | os.PathLike | None) -> None:
        """Make ``source`` (host directory or archive; None = empty) the initial workspace, and reset to it."""
        self._snapshot.clear()
        if source is not None:
            self._snapshot.import_tree(source)
        self.reset()

    def snapshot(self) -> None:
        """Make the current workspace the state ``reset`` returns to (after setup commands)."""
        self._snapshot.clear()
        self.workspace.export_tree(".", self._snapshot.root)
        if self._snapshot.owner is not None:
            chown_tree(self._snapshot.root, self._snapshot.owner)

    def reset(self) -> None:
        """Kill every process, restore the snapshot, start a pristine shell in ``workdir``."""
        self.start()
        swept = self._shell.run(KILL_SWEEP, RESET_TIMEOUT)
        if swept.exit_code is None:
            self._restart(None)  # the shell itself is broken; killing from outside also sweeps
        self._evacuate_workspace()
        out = self._shell.reset(RESET_TIMEOUT)
        if out.exit_code == 0:
            return
        # The shell was broken (exited, hung, its variables clobbered): start over from outside.
        self._restart(None)
        out = self._shell.reset(RESET_TIMEOUT)
        if out.exit_code != 0:
            raise SandboxError(f"{self.backend} sandbox could not be reset: {out.output.strip() or 'no output'}")

    def _evacuate_workspace(self) -> None:
        # Deleting a checkout costs ~50 ms of unlinks on a virtual disk; renaming its entries
        # into a trash directory beside the mounts costs microseconds, and the deletion runs
        # on a background thread. Nothing in the sandbox is alive to see or race this.
        trash = self._tmp / "trash" / uuid.uuid4().hex
        try:
            trash.mkdir(parents=True)
        except OSError:  # no inode left for the trash dir (a full workspace tmpfs): delete now
            self.workspace.clear()
            return
        for entry in os.scandir(self.workspace.root):
            os.rename(entry.path, trash / entry.name)
        _TRASH.submit(shutil.rmtree, trash, onerror=_force_remove)

    # -- files ---------------------------------------------------------------------------
    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """Bytes of a workspace file (relative, or absolute under ``workdir``)."""
        return self.workspace.read_bytes(path, max_bytes)

    def write_file(self, path: str, data: bytes | str) -> None:
        """Create or overwrite a workspace file, creating parent directories.

        Bounded like a write from inside (``max_file_mb``): the host writes it, so no rlimit would.
        """
        data = data.encode() if isinstance(data, str) else data
        limit = self.config.max_file_mb * 1024 * 1024
        if len(data) > limit:
            raise OSError(errno.EFBIG, f"file larger than max_file_mb ({self.config.max_file_mb} MiB)", path)
        self.workspace.write_bytes(path, data)

    def upload(self, host_dir: str | os.PathLike, dest: str = ".") -> int:
        """Copy a host directory (or archive) into the workspace; return the number of files."""
        return self.workspace.import_tree(host_dir, dest)

    def download(self, source: str, host_dir: str | os.PathLike) -> int:
        """Copy a workspace directory to the host; return the number of files."""
        return self.workspace.export_tree(source, host_dir)

    def restore(self, paths: list[str]) -> list[str]:
        """Put ``paths`` back as the snapshot has them (deleting those it lacks); return the restored.

        Used before grading so an agent cannot pass by editing the tests themselves: a task
        names its test files in ``metadata["protected_paths"]``.
        """
        restored = []
        for path in paths:
            parts = self.workspace.parts(path)
            original = self._snapshot.root.joinpath(*parts)
            self.workspace.remove(path)
            if original.is_file() and not original.is_symlink():
                self.workspace.write_bytes(path, original.read_bytes())
                # nothing runs in the sandbox now (killed above), so the path cannot be swapped meanwhile
                os.chmod(self.workspace.root.joinpath(*parts), original.stat().st_mode & 0o777)
            restored.append(self.workspace.display(parts))
        return restored

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._created else "new")
        return f"<{type(self).__name__} {state} workspace={self.host_workspace}>"


def _force_remove(func, path, _exc_info) -> None:
    try:
        os.chmod(os.path.dirname(path), 0o700)
        func(path)
    except OSError:
        pass
