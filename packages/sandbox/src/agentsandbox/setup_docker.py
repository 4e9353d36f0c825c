"""Prepare this machine for both sandbox backends: ``python -m agentsandbox.setup_docker`` (as root).

It runs ``setup_docker.sh``, shipped beside this module: install ``docker.io``, ``bubblewrap``
and ``debootstrap`` with apt when missing, allow unprivileged user namespaces for bubblewrap,
start ``dockerd`` when no daemon answers, and build the base image ``knowlyr/sandbox-base:latest``
(images cannot be pulled here, so it is debootstrapped and imported). Every step is skipped when
already done. ``IMAGE``, ``MIRROR`` and ``SUITE`` in the environment override the defaults.

Run as another user it changes nothing: it prints the ``sudo`` command line (with this
interpreter, which has the package) and exits 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

SCRIPT = Path(__file__).with_name("setup_docker.sh")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if args:
        print(f"error: setup_docker takes no arguments, got {' '.join(args)!r}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print(
            "error: setup_docker installs packages and starts dockerd, so it needs root: "
            f"sudo {sys.executable} -m agentsandbox.setup_docker",
            file=sys.stderr,
        )
        return 2
    return subprocess.run(["bash", str(SCRIPT)], check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
