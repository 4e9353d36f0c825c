"""Garbage collection of sandboxes whose owner died without closing them.

Sandboxes close on ``close()``, on interpreter exit and when collected, but a process killed
by SIGKILL (or a crashed CI job) runs none of those. Every container carries labels naming
the host and pid that created it, and every workspace directory's name (under /dev/shm or the temp dir) carries the pid, so
orphans are recognisable: the owner pid is no longer alive on this host. Local sandbox
processes need no collection: ``bwrap --die-with-parent`` ends them with their owner.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from agentsandbox.backends.base import TEMP_PREFIX, scratch_roots, unmount
from agentsandbox.backends.docker import LABEL, LABEL_HOST, LABEL_PID

_DIR_PID = re.compile(rf"^{re.escape(TEMP_PREFIX)}(\d+)-")


@dataclass
class GCReport:
    """What ``collect_garbage`` removed (or would remove, with ``dry_run``)."""

    containers: list[str] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def collect_garbage(*, all_sandboxes: bool = False, dry_run: bool = False, docker: bool = True) -> GCReport:
    """Remove orphaned sandbox containers and directories (every one with ``all_sandboxes``)."""
    report = GCReport()
    host = os.uname().nodename
    if docker:
        from docker.errors import NotFound

        from agentsandbox.backends.docker import docker_client

        try:
            client = docker_client(timeout=10)
            # ignore_removed: a container that goes away between the listing and its inspection (another
            # process closing its sandbox) is skipped, not an error that hides every other one
            containers = client.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True)
        except Exception as exc:
            report.errors.append(f"docker: {exc}")
            containers = []
            client = None
        for container in containers:
            labels = container.labels
            pid = int(labels.get(LABEL_PID, "0") or 0)
            # a container of another host sharing this daemon cannot be judged from here
            orphan = labels.get(LABEL_HOST) == host and not _alive(pid)
            if not (all_sandboxes or orphan):
                continue
            report.containers.append(container.id[:12])
            if not dry_run:
                try:
                    container.remove(force=True)
                except NotFound:
                    pass  # gone already: what was asked for
                except Exception as exc:
                    report.errors.append(f"container {container.id[:12]}: {exc}")
        if client is not None:
            client.close()
    for entry in (e for root in scratch_roots() for e in Path(root).glob(f"{TEMP_PREFIX}*")):
        match = _DIR_PID.match(entry.name)
        if not match or not entry.is_dir():
            continue
        if not (all_sandboxes or not _alive(int(match.group(1)))):
            continue
        report.directories.append(str(entry))
        if not dry_run:
            unmount(entry)
            shutil.rmtree(entry, ignore_errors=True)
    return report
