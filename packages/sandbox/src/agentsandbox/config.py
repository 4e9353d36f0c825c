"""``SandboxConfig``: the image, limits and defaults a sandbox is created with.

One dataclass shared by both backends, so a task or a CLI flag means the same thing on
Docker and on the local bubblewrap backend. Where a backend cannot enforce a field, its
docstring says so, and ``sandbox.enforced_limits`` lists what holds on this host (the local
backend has cgroups only when it runs as root).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from knowlyrcore.numbers import checked_number

DEFAULT_IMAGE = "knowlyr/sandbox-base:latest"
#: ``HOME`` of the clean environment tests are graded in (an empty directory under /tmp).
CLEAN_HOME = "/tmp/.knowlyr-home"
#: Longest timeout any command may ask for (a day): keeps timers finite and in range.
MAX_TIMEOUT = 86_400.0


def check_timeout(timeout: object, *, clamp_to: float | None = None) -> float:
    """``timeout`` as seconds, or ``ValueError`` naming the problem (not a number, <= 0, NaN, too long).

    With ``clamp_to`` (an agent's request) a longer timeout, infinity and integers too large for
    a float included, is cut to it instead of refused.
    """
    limit = MAX_TIMEOUT if clamp_to is None else min(clamp_to, MAX_TIMEOUT)
    return checked_number(
        timeout, "timeout (seconds)", minimum=0, maximum=limit, exclusive_minimum=True, clamp=clamp_to is not None
    )


@dataclass
class SandboxConfig:
    """Limits and defaults of one sandbox."""

    #: Docker image (Docker backend only); build it with ``python -m agentsandbox.setup_docker``.
    image: str = DEFAULT_IMAGE
    #: Path of the workspace inside the sandbox; commands start there.
    workdir: str = "/workspace"
    #: CPU cores (Docker: CFS quota; local: cgroup quota when root, else not enforced).
    cpus: float = 1.0
    #: Memory limit in MiB (Docker: cgroup limit; local: cgroup when root, else address space per process).
    memory_mb: int = 1024
    #: Maximum number of processes (Docker: pids cgroup; local: pids cgroup when root, else RLIMIT_NPROC).
    pids_limit: int = 256
    #: Allow network access. Off by default: the sandbox has only a loopback interface.
    network: bool = False
    #: Per-command timeout in seconds; the command is killed when it runs longer. Also the most
    #: an agent may ask for: a ``bash`` call's own ``timeout`` is clamped to it.
    timeout: float = 60.0
    #: Output kept per command; the rest is dropped and the result marked truncated.
    max_output_bytes: int = 64 * 1024
    #: Output after which a still-running command is killed (a runaway `yes`).
    overflow_bytes: int = 8 * 1024 * 1024
    #: Largest file a process may write, in MiB (RLIMIT_FSIZE on both backends).
    max_file_mb: int = 256
    #: Size of the in-sandbox /tmp (a tmpfs on Docker), in MiB.
    tmp_mb: int = 256
    #: Files and directories the in-sandbox /tmp (and /dev/shm) may hold: the tmpfs
    #: ``nr_inodes`` (Docker, and the local backend when it runs as root; see its docstring).
    tmp_inodes: int = 65536
    #: Files and directories the workspace and its snapshot may hold together where they live
    #: in RAM (Docker on a root host: the sandbox directory is a tmpfs of its own).
    workspace_inodes: int = 262144
    #: Extra environment variables for the shell.
    env: dict[str, str] = field(default_factory=dict)

    def shell_env(self) -> dict[str, str]:
        """The environment every sandbox shell starts with (nothing leaks from the host)."""
        base = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/tmp",
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "PAGER": "cat",
            "GIT_PAGER": "cat",
            "GIT_AUTHOR_NAME": "knowlyr-sandbox",
            "GIT_AUTHOR_EMAIL": "sandbox@knowlyr.invalid",
            "GIT_COMMITTER_NAME": "knowlyr-sandbox",
            "GIT_COMMITTER_EMAIL": "sandbox@knowlyr.invalid",
            "GIT_CONFIG_NOSYSTEM": "1",
            # an edit within the same second keeps size and mtime: a cached .pyc would go stale
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        return {**base, **self.env}

    def clean_env(self) -> dict[str, str]:
        """The environment graded test runs get: ``shell_env`` without anything user-writable.

        No user site-packages (a ``.pth`` there runs in every Python), no user or system git
        config (``core.fsmonitor`` and friends run programs), an empty ``HOME``. Variables the
        caller set in ``env`` stay: they are trusted, the agent cannot change them.
        """
        env = self.shell_env()
        env.update(
            HOME=CLEAN_HOME,
            PYTHONNOUSERSITE="1",
            GIT_CONFIG_NOSYSTEM="1",
            GIT_CONFIG_GLOBAL="/dev/null",
            XDG_CONFIG_HOME=CLEAN_HOME + "/.config",
        )
        return env
