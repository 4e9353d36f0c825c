"""A cgroup per local sandbox: one memory, process and CPU budget for all its processes together.

rlimits count per process (``RLIMIT_AS`` let four 800 MB processes share a 1 GB budget). When
this process runs as root and finds a writable cgroup hierarchy — cgroup v2 with the memory
and pids controllers, or cgroup v1 with memory and pids hierarchies — each sandbox gets a
cgroup of its own with

- memory, swap included, of ``memory_mb``: its processes' memory and the tmpfs pages they
  write (/tmp, a RAM-backed workspace); over it the kernel OOM-kills a process inside;
- ``pids_limit`` processes and threads;
- a CPU quota of ``cpus`` when the cpu controller is there too.

Placement: under cgroup v1, a child of this process's own cgroup in each hierarchy, so the
caller's own limits still hold over it. Under v2 a cgroup that holds processes cannot enable
controllers for its children, so the sandbox's cgroup is a child of this process's cgroup
only when that is the root, else its sibling (under the same parent, within the parent's
limits). The bwrap process joins in its pre-exec hook, before it forks anything, so every
process of the sandbox starts inside; ``remove`` deletes the cgroup once they are gone.

A cgroup is named after the sandbox's temp directory (``knowlyr-sandbox-<pid>-...``), so one
left by a killed host process can be told apart and removed.
"""

from __future__ import annotations

import functools
import os
import signal
import time
from pathlib import Path

CPU_PERIOD_US = 100_000
#: Swap accounting may be off (v1 without ``swapaccount``, v2 without swap): then only RAM counts.
_OPTIONAL = {"memory.swap.max", "memory.memsw.limit_in_bytes"}


class CgroupUnavailable(OSError):
    """No cgroup can be created here (not root, no writable hierarchy, no controller)."""


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(fstype, mount root, mount point, super options) of every cgroup mount."""
    found = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields, _, tail = line.partition(" - ")
            fstype, _source, options = tail.split()[:3]
            if fstype in ("cgroup", "cgroup2"):
                parts = fields.split()
                found.append((fstype, parts[3], parts[4], set(options.split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller ('' for v2), from /proc/self/cgroup."""
    paths = {}
    with open("/proc/self/cgroup") as handle:
        for line in handle:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path
    return paths


def _own_dir(root: str, mountpoint: str, path: str) -> Path | None:
    # a mount may show only a subtree (its root); a cgroup outside it is not reachable
    rel = os.path.relpath(path, root)
    return None if rel.startswith("..") else Path(mountpoint, rel).resolve()


def _v2_parent() -> tuple[Path, set[str]] | None:
    own_paths = _own_paths()
    for fstype, root, mountpoint, _ in _mounts():
        if fstype != "cgroup2" or "" not in own_paths:
            continue
        own = _own_dir(root, mountpoint, own_paths[""])
        if own is None:
            continue
        parent = own if own == Path(mountpoint).resolve() else own.parent
        available = set((parent / "cgroup.controllers").read_text().split())
        if not {"memory", "pids"} <= available:
            continue
        wanted = {"memory", "pids"} | ({"cpu"} & available)
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
        if not wanted <= enabled:
            try:
                (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted - enabled))
            except OSError as exc:
                raise CgroupUnavailable(f"cgroup v2: cannot enable {sorted(wanted)} in {parent}: {exc}") from None
        return parent, wanted
    return None


def _v1_parents() -> dict[str, Path]:
    own_paths = _own_paths()
    parents = {}
    for fstype, root, mountpoint, options in _mounts():
        for controller in ("memory", "pids", "cpu"):
            if fstype == "cgroup" and controller in options and controller in own_paths:
                own = _own_dir(root, mountpoint, own_paths[controller])
                if own is not None:
                    parents[controller] = own
    return parents


@functools.cache
def cgroup_parents() -> tuple[int, dict[str, Path]]:
    """(cgroup version, directory to create sandbox cgroups in per controller); raises CgroupUnavailable."""
    if os.geteuid() != 0:
        raise CgroupUnavailable("not root: no cgroup can be created")
    v2 = _v2_parent()
    if v2 is not None:
        parent, controllers = v2
        parents = {controller: parent for controller in controllers}
        version = 2
    else:
        parents = _v1_parents()
        version = 1
        if not {"memory", "pids"} <= parents.keys():
            raise CgroupUnavailable("no cgroup v2 with memory and pids controllers, nor v1 memory and pids hierarchies")
    for parent in set(parents.values()):
        probe = parent / f"knowlyr-probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError as exc:
            raise CgroupUnavailable(f"cgroup v{version}: cannot create a cgroup in {parent}: {exc}") from None
    return version, parents


def cgroup_status() -> tuple[bool, str]:
    """Whether sandboxes get a cgroup here, and which (or why not)."""
    try:
        version, parents = cgroup_parents()
    except (CgroupUnavailable, OSError) as exc:
        return False, str(exc)
    return True, f"cgroup v{version} ({', '.join(sorted(parents))})"


class SandboxCgroup:
    """The cgroup (one per v1 hierarchy) of one sandbox; see the module docstring."""

    def __init__(self, name: str, *, memory_mb: int, pids: int, cpus: float):
        self.version, parents = cgroup_parents()
        self.controllers = sorted(parents)
        self.dirs = sorted({parent / name for parent in parents.values()})
        limits = self._limits(memory_mb * 1024 * 1024, pids, cpus)
        try:
            for path in self.dirs:
                path.mkdir()
            for controller, settings in limits.items():
                for file, value in settings:
                    target = parents[controller] / name / file
                    if file not in _OPTIONAL or target.exists():
                        target.write_text(value)
        except OSError as exc:
            self.remove()
            raise CgroupUnavailable(f"cgroup v{self.version}: cannot set up {name}: {exc}") from None
        # pre-exec hooks run between fork and exec: hand them paths as bytes, computed here
        self._procs = [os.fsencode(path / "cgroup.procs") for path in self.dirs]

    def _limits(self, memory: int, pids: int, cpus: float) -> dict[str, list[tuple[str, str]]]:
        quota = str(max(int(cpus * CPU_PERIOD_US), 1000))
        if self.version == 2:
            memory_settings = [("memory.max", str(memory)), ("memory.swap.max", "0")]
            cpu_settings = [("cpu.max", f"{quota} {CPU_PERIOD_US}")]
        else:  # memsw (memory + swap) must not go below the memory limit: set that first
            memory_settings = [("memory.limit_in_bytes", str(memory)), ("memory.memsw.limit_in_bytes", str(memory))]
            cpu_settings = [("cpu.cfs_period_us", str(CPU_PERIOD_US)), ("cpu.cfs_quota_us", quota)]
        limits = {"memory": memory_settings, "pids": [("pids.max", str(pids))], "cpu": cpu_settings}
        return {controller: limits[controller] for controller in self.controllers}

    @property
    def swap_counted(self) -> bool:
        swap = "memory.swap.max" if self.version == 2 else "memory.memsw.limit_in_bytes"
        return any((path / swap).exists() for path in self.dirs)

    def join(self) -> None:
        """Move the calling process into the cgroup (from a pre-exec hook, before it forks)."""
        pid = str(os.getpid()).encode()
        for procs in self._procs:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def remove(self, timeout: float = 10.0) -> None:
        """Kill whatever is still inside and delete the cgroup (best effort within ``timeout``)."""
        deadline = time.monotonic() + timeout
        for path in self.dirs:
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY: processes are still inside
                    if time.monotonic() > deadline:
                        break
                    for pid in (path / "cgroup.procs").read_text().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    time.sleep(0.005)  # polling the kernel until the killed processes are reaped
