#!/usr/bin/env bash
# Make sure the system components `make install` / `make demo` need are present.
#   bash scripts/ensure_system.sh            # Python venv support (ensurepip)
#   bash scripts/ensure_system.sh --sandbox  # ... and a working sandbox backend (Docker or bubblewrap)
#   bash scripts/ensure_system.sh --bwrap    # ... and bubblewrap and git (knowlyr/mcp's sandboxed servers, DEMO_SUITE=mcp-git)
# As root on Debian/Ubuntu the missing packages are installed with apt-get; otherwise one line
# says exactly what to install, and the script exits 1.
set -euo pipefail
PYTHON="${PYTHON:-python3}"

need=()
if ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    need+=("python3-venv")
fi
if [ "${1:-}" = "--sandbox" ]; then
    # Docker when a daemon answers, else bubblewrap (the daemonless local backend).
    if ! { command -v docker >/dev/null && docker info >/dev/null 2>&1; } && ! command -v bwrap >/dev/null; then
        need+=("bubblewrap")
    fi
fi
if [ "${1:-}" = "--bwrap" ]; then
    command -v bwrap >/dev/null || need+=("bubblewrap")
    command -v git >/dev/null || need+=("git")
fi
((${#need[@]})) || exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "[ensure_system] installing ${need[*]} with apt-get" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
else
    echo "[ensure_system] missing system packages; install them first: sudo apt-get install ${need[*]}" >&2
    exit 1
fi
