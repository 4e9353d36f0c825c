#!/usr/bin/env bash
# Prepare a machine for knowlyr-sandbox: a Docker daemon, bubblewrap and
# the local base image knowlyr/sandbox-base:latest (Debian bookworm minbase with python3 and git).
# Images cannot be pulled here, so the image is built with debootstrap and `docker import`.
# Idempotent: every step is skipped when already done. Needs root. Shipped in the wheel and run by
# `python -m agentsandbox.setup_docker`. Usage:
#   python -m agentsandbox.setup_docker            # install, start, build
#   IMAGE=name:tag MIRROR=http://... python -m agentsandbox.setup_docker
set -euo pipefail

IMAGE="${IMAGE:-knowlyr/sandbox-base:latest}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
SUITE="${SUITE:-bookworm}"
PACKAGES="python3,git,coreutils,grep,findutils,procps,sed,gawk,diffutils,patch,tar,gzip,ca-certificates"

log() { printf '[setup_docker] %s\n' "$*" >&2; }

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)  # a docker CLI alone (no daemon) is not enough
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The local backend runs bubblewrap as an unprivileged uid, which needs unprivileged user
# namespaces; some kernels (Debian before bookworm, Ubuntu 24.04's AppArmor) restrict them.
for knob in kernel/unprivileged_userns_clone:1 kernel/apparmor_restrict_unprivileged_userns:0; do
    file="/proc/sys/${knob%%:*}" want="${knob##*:}"
    if [ -w "$file" ] && [ "$(cat "$file")" != "$want" ]; then
        log "setting ${knob%%:*}=$want for bubblewrap"
        echo "$want" >"$file"
    fi
done

if ! docker info >/dev/null 2>&1; then
    if command -v systemctl >/dev/null && systemctl start docker 2>/dev/null; then
        log "started docker via systemd"
    else
        log "starting dockerd in the background (log: /tmp/dockerd.log)"
        nohup dockerd >/tmp/dockerd.log 2>&1 &
    fi
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    docker info >/dev/null 2>&1 || { log "dockerd did not come up; see /tmp/dockerd.log"; exit 1; }
fi
log "docker daemon reachable"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "image $IMAGE already present"
    exit 0
fi

rootfs="$(mktemp -d /tmp/knowlyr-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
log "debootstrap $SUITE (minbase + python3, git) into $rootfs; this takes a few minutes"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR" >/tmp/knowlyr-debootstrap.log 2>&1 \
    || { log "debootstrap failed; see /tmp/knowlyr-debootstrap.log"; tail -20 /tmp/knowlyr-debootstrap.log >&2; exit 1; }
# Keep the image small: package caches and docs are not needed inside a sandbox.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
mkdir -p "$rootfs/workspace"
tar -C "$rootfs" -c . | docker import \
    --change 'WORKDIR /workspace' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' \
    - "$IMAGE" >/dev/null
log "built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes)"
