"""``DockerSandbox``: a sandbox in a Docker container, driven through the docker SDK.

The container is created once per sandbox and kept warm across episodes: ``reset`` restores
the workspace and replaces the shell in place, so an episode does not pay for a container
start. The container's pid 1 is a bash that reaps orphans and survives ``kill -9 -1``. Everything
runs as a private non-root uid when the host runs as root (the workspace is handed to it),
else as the caller's uid (so the bind-mounted workspace stays the caller's), with:

- no network (``network_mode="none"``) unless ``config.network``;
- a read-only root filesystem, tmpfs ``/tmp`` and ``/dev/shm`` of ``tmp_mb`` and
  ``tmp_inodes`` each, the workspace bind-mounted read-write and the snapshot read-only;
- CPU quota, memory (swap included) and pids cgroup limits, RLIMIT_FSIZE;
- every capability dropped, ``no-new-privileges`` and Docker's default seccomp profile
  (no ``unshare``, ``mount``, ``ptrace``, ...);
- labels naming the owner process, so ``knowlyr-sandbox gc`` can remove orphans.

The workspace usually lives in the host's /dev/shm (``scratch_root``): its pages, and the
kernel memory of its inodes, are charged to the container's memory cgroup, which is all that
bounds it — about 1000 files per MiB of ``memory_mb`` (measured: ~135,000 empty files under
128 MiB), so a 1 GiB sandbox can take ~1.1 million of the host tmpfs's inodes.
``enforced_limits`` lists what holds.

The persistent shell is one ``docker exec -i`` whose attach socket carries the requests
(stdin) and the multiplexed output stream (8-byte frame headers, decoded here).
"""

from __future__ import annotations

import os
import re
import select
import socket
import struct
import time

from agentsandbox.backends.base import SNAPSHOT_MOUNT, BackendUnavailable, Sandbox, SandboxError
from agentsandbox.shell import ShellError, Transport

#: Every container this package creates carries this label (``gc`` selects on it).
LABEL = "knowlyr.sandbox"
LABEL_PID = "knowlyr.sandbox.pid"
LABEL_HOST = "knowlyr.sandbox.host"
LABEL_CREATED = "knowlyr.sandbox.created"

#: The container's pid 1. The kernel shields a namespace's pid 1 from signals sent inside it,
#: so the in-shell ``kill -9 -1`` of ``reset`` cannot stop the container. It blocks reading a
#: FIFO it holds open (no child of its own for that kill to hit and respawn), and as bash it
#: reaps the orphans the kill leaves behind (Docker's tini would exit with its child instead).
KEEPER = "mkfifo /tmp/.keeper && exec 3<>/tmp/.keeper && rm -f /tmp/.keeper; while :; do read -r -u 3 _; done"


def docker_client(timeout: int = 30):
    """A docker SDK client from the environment (``DOCKER_HOST`` or the default socket)."""
    import docker

    return docker.from_env(timeout=timeout)


#: How to get a daemon and the base image: a module of this package (the wheel ships its script).
SETUP_HINT = "set it up as root with: python -m agentsandbox.setup_docker"
#: The socket's own error ("No such file or directory", "Connection refused", "Permission denied"),
#: deep in the text of the SDK's exception.
_SOCKET_ERROR = re.compile(r"(?:\w+Error\(\d+, '|\[Errno \d+\] )([^'\")]+)")


def docker_status(image: str | None = None) -> tuple[bool, str]:
    """Whether a Docker daemon is reachable (and ``image`` present), and why not (one line)."""
    try:
        client = docker_client(timeout=5)
        version = client.version().get("Version", "?")
    except Exception as exc:
        where = os.environ.get("DOCKER_HOST") or "the default socket"
        cause = _SOCKET_ERROR.search(str(exc))
        detail = cause.group(1) if cause else " ".join(str(exc).split())[:160]
        return False, f"no Docker daemon reachable at {where} ({detail}); {SETUP_HINT}"
    try:
        if image is not None:
            try:
                client.images.get(image)
            except Exception:
                return False, f"Docker {version} is up but image {image!r} is missing; {SETUP_HINT}"
        return True, f"Docker daemon {version}"
    finally:
        client.close()


class DockerTransport(Transport):
    """The attach socket of a ``docker exec -i`` (non-tty, so output frames are multiplexed)."""

    def __init__(self, sock):
        # The SDK wraps the raw socket; reading it directly keeps select() honest.
        self.sock: socket.socket = getattr(sock, "_sock", sock)
        self._wrapper = sock
        self._raw = bytearray()

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise ShellError(f"shell stdin closed: {exc}") from None

    def recv(self, timeout: float) -> bytes | None:
        deadline = time.monotonic() + max(timeout, 0)
        while True:
            payload = self._decode()
            if payload:
                return payload
            ready, _, _ = select.select([self.sock], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                return None
            chunk = self.sock.recv(65536)
            if not chunk:
                return b""
            self._raw.extend(chunk)

    def _decode(self) -> bytes:
        out = bytearray()
        while len(self._raw) >= 8:
            _stream, size = struct.unpack(">BxxxL", self._raw[:8])
            if len(self._raw) < 8 + size:
                break
            out.extend(self._raw[8 : 8 + size])
            del self._raw[: 8 + size]
        return bytes(out)

    def close(self) -> None:
        # Closing the socket object alone leaves the connection open: the SDK's wrapper holds a
        # reference to it (in a cycle with the HTTP response), so the descriptor lived until
        # Python's cycle collector ran. Until then the daemon kept pushing a killed `yes`'s
        # output into it and hung: the `kill -9 -1` exec never finished, the container was
        # restarted after 10 s, the next shell failed ("cannot exec in a stopped state") and
        # removing the container waited 10-20 s more. shutdown ends the connection whoever
        # still refers to it.
        for close in (lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close, self._wrapper.close):
            try:
                close()
            except OSError:
                pass


class DockerSandbox(Sandbox):
    """Runs commands in a warm Docker container; see the module docstring for the containment."""

    backend = "docker"
    # pages written to a /dev/shm workspace are charged to the container's memory cgroup
    memory_backed_workspace = True

    def _create(self) -> None:
        from docker.types import Ulimit

        ok, why = docker_status(self.config.image)
        if not ok:
            raise BackendUnavailable(f"docker backend unavailable: {why}")
        cfg = self.config
        self._client = docker_client()
        fsize = cfg.max_file_mb * 1024 * 1024
        try:
            self.container = self._client.containers.run(
                cfg.image,
                ["bash", "-c", KEEPER],
                detach=True,
                user="{}:{}".format(*(self._owner() or (os.getuid(), os.getgid()))),
                working_dir=cfg.workdir,
                network_mode="bridge" if cfg.network else "none",
                read_only=True,
                # Docker's own /dev/shm has no inode limit: replace it with a bounded one
                tmpfs={
                    scratch: f"rw,nosuid,nodev,size={cfg.tmp_mb}m,nr_inodes={cfg.tmp_inodes},mode=1777"
                    for scratch in ("/tmp", "/dev/shm")
                },
                volumes={
                    str(self.workspace.root): {"bind": cfg.workdir, "mode": "rw"},
                    str(self._snapshot.root): {"bind": SNAPSHOT_MOUNT, "mode": "ro"},
                },
                mem_limit=f"{cfg.memory_mb}m",
                memswap_limit=f"{cfg.memory_mb}m",
                nano_cpus=int(cfg.cpus * 1e9),
                pids_limit=cfg.pids_limit,
                ulimits=[Ulimit(name="fsize", soft=fsize, hard=fsize), Ulimit(name="core", soft=0, hard=0)],
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                labels={
                    LABEL: "1",
                    LABEL_PID: str(os.getpid()),
                    LABEL_HOST: os.uname().nodename,
                    LABEL_CREATED: str(int(time.time())),
                },
                environment=cfg.shell_env(),
            )
            self._container_id = self.container.id
        except Exception as exc:
            raise SandboxError(f"cannot start a container from {cfg.image!r}: {exc}") from exc

    @property
    def enforced_limits(self) -> dict[str, str]:
        """What bounds this sandbox, per resource (the same keys as ``LocalSandbox``'s)."""
        cfg = self.config
        in_shm = str(self._tmp).startswith("/dev/shm/")
        return {
            "memory": f"cgroup: {cfg.memory_mb} MiB for all processes and tmpfs pages together, swap included",
            "processes": f"cgroup: {cfg.pids_limit} processes and threads",
            "cpus": f"cgroup: {cfg.cpus:g} CPUs",
            "tmp": f"tmpfs of {cfg.tmp_mb} MiB and {cfg.tmp_inodes} inodes each for /tmp and /dev/shm",
            "workspace": (
                f"its own tmpfs in the host's /dev/shm: {cfg.workspace_inodes} inodes, {2 * cfg.memory_mb + 64} MiB "
                "with the snapshot, pages counted in the memory cgroup"
                if self._own_mount
                else "in the host's /dev/shm, counted in the memory cgroup (inodes too: ~1000 per MiB)"
                if in_shm
                else f"on the host disk: only max_file_mb ({cfg.max_file_mb} MiB) per file"
            ),
            "file_size": f"RLIMIT_FSIZE: {cfg.max_file_mb} MiB per file",
            "syscalls": "Docker's default seccomp profile, every capability dropped, no-new-privileges",
            "root_filesystem": "read-only",
        }

    def _spawn_shell(self, argv: list[str], env: dict[str, str]) -> Transport:
        api = self._client.api
        exec_id = api.exec_create(
            self.container.id,
            ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv],
            stdin=True,
            stdout=True,
            stderr=True,
            tty=False,
            workdir=self.config.workdir,
        )["Id"]
        return DockerTransport(api.exec_start(exec_id, socket=True))

    def _kill_all(self) -> None:
        # `kill -9 -1` from a fresh exec reaches every process but pid 1 (the keeper). When no
        # exec can start (a fork bomb holds every pid of the cgroup), restart the container:
        # that kills everything too and keeps its mounts and limits.
        import docker.errors

        api = self._client.api
        try:
            exec_id = api.exec_create(self.container.id, ["kill", "-9", "-1"])["Id"]
            # detached: attaching to output can hang while the daemon still drains the killed
            # shell's stream; poll the exec's state instead
            api.exec_start(exec_id, detach=True)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                state = api.exec_inspect(exec_id)
                if not state.get("Running"):
                    if state.get("ExitCode") in (0, 1):
                        return
                    break
                time.sleep(0.005)
        except docker.errors.APIError:
            pass
        self.container.restart(timeout=0)

    def _destroy(self) -> None:
        container = getattr(self, "container", None)
        if container is not None:
            try:
                container.remove(force=True)
            except Exception as exc:
                if "No such container" not in str(exc):
                    raise
            self.container = None
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()
