#!/usr/bin/env bash
# Bring up a local, offline Docker engine and the creditgym base image.
#
#   bash .ci/engine.sh        (what `make engine` runs)
#
# Idempotent: each step is skipped when its result is already there, so a
# second run takes about a second. Steps:
#   1. apt-get install docker.io + debootstrap          (only if dockerd/debootstrap missing)
#   2. start dockerd --bridge=none --iptables=false     (only if `docker info` does not answer)
#      storage driver: overlay2, falling back to vfs if overlay2 will not start
#   3. debootstrap + `docker import` the base image     (only if the tag is missing)
#
# Environment:
#   CREDITGYM_BASE_IMAGE      base image tag            (default creditgym-base:bookworm)
#   CREDITGYM_BASE_SUITE      Debian suite to bootstrap (default bookworm)
#   CREDITGYM_DEBIAN_MIRROR   mirror for debootstrap    (default: the one apt uses)
#   CREDITGYM_STORAGE_DRIVER  force a storage driver    (default: overlay2, then vfs)
#   CREDITGYM_DOCKERD_LOG     dockerd log file          (default /var/log/creditgym-dockerd.log)
#   CREDITGYM_ENGINE_WAIT     seconds to wait for dockerd (default 60)
#
# Nothing here pulls from a registry: the only network traffic is apt/debootstrap
# talking to the Debian mirror. Containers get no network (no bridge exists).
set -euo pipefail

BASE_IMAGE="${CREDITGYM_BASE_IMAGE:-creditgym-base:bookworm}"
SUITE="${CREDITGYM_BASE_SUITE:-bookworm}"
DOCKERD_LOG="${CREDITGYM_DOCKERD_LOG:-/var/log/creditgym-dockerd.log}"
WAIT_S="${CREDITGYM_ENGINE_WAIT:-60}"
INCLUDE_PKGS="python3,git,patch,ca-certificates"

say() { printf '[engine] %s\n' "$*"; }
die() { printf '[engine] ERROR: %s\n' "$*" >&2; exit 1; }
now() { date +%s; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "must run as root (or have sudo)"
    SUDO="sudo"
fi

# /usr/local/bin/docker (client 28.x) negotiates down to the daemon's API
# (20.10 = API 1.41), so no DOCKER_API_VERSION is needed. Prefer it if present.
DOCKER="$(command -v docker || true)"

engine_up() { [ -n "$DOCKER" ] && "$DOCKER" info >/dev/null 2>&1; }

# ---------------------------------------------------------------- 1. packages
if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
    say "installing docker.io + debootstrap from the Debian mirror"
    t0=$(now)
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    # Recommends (apparmor, cgroupfs-mount, needrestart, ...) are not needed.
    # docker.io pulls containerd, runc, tini and iptables as hard dependencies.
    $SUDO apt-get install -y -qq --no-install-recommends docker.io debootstrap >/dev/null
    say "packages installed in $(( $(now) - t0 ))s"
fi
[ -n "$DOCKER" ] || DOCKER="$(command -v docker || true)"
[ -n "$DOCKER" ] || die "no docker client found after install"

# ---------------------------------------------------------------- 2. dockerd
# A killed daemon can linger as a zombie (state Z) when PID 1 does not reap
# orphans, and `kill -0` succeeds on zombies: read the state from /proc instead.
pid_alive() {   # $1 = pid, optional $2 = expected command name
    local stat state
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    state="${stat##*) }"; state="${state%% *}"
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ] || return 1
    [ -z "${2:-}" ] || [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ]
}
dockerd_alive() { [ -n "${DOCKERD_PID:-}" ] && pid_alive "$DOCKERD_PID"; }

start_dockerd() {   # $1 = storage driver
    say "starting dockerd (storage driver $1, log $DOCKERD_LOG)"
    {
        printf '\n==== %s creditgym engine.sh: dockerd --storage-driver=%s ====\n' "$(date -Is)" "$1"
    } | $SUDO tee -a "$DOCKERD_LOG" >/dev/null
    # setsid + nohup: own session, so it survives the calling make/shell.
    # The redirections happen inside sh so they also work through sudo.
    $SUDO sh -c 'exec setsid nohup dockerd "$@" >>"$0" 2>&1 </dev/null' "$DOCKERD_LOG" \
        --bridge=none --iptables=false --ip-masq=false --storage-driver="$1" &
    DOCKERD_PID=$!
}

wait_engine() {   # returns 0 once `docker info` answers, 1 if dockerd died or timed out
    local deadline=$(( $(now) + WAIT_S ))
    while [ "$(now)" -lt "$deadline" ]; do
        engine_up && return 0
        # With sudo, $DOCKERD_PID is sudo's pid; it exits when dockerd does.
        dockerd_alive || { sleep 0.5; engine_up && return 0; return 1; }
        sleep 0.5
    done
    return 1
}

if engine_up; then
    say "engine already answering"
else
    if pid="$(cat /var/run/docker.pid 2>/dev/null)" && [ -n "$pid" ] && pid_alive "$pid" dockerd; then
        # A dockerd is running but not answering yet (still starting?): give it time.
        say "dockerd (pid $pid) running but not answering; waiting up to ${WAIT_S}s"
        DOCKERD_PID="$pid"
        wait_engine || { tail -n 30 "$DOCKERD_LOG" >&2 || true
                         die "dockerd pid $pid does not answer; stop it (kill $pid) and rerun"; }
    else
        t0=$(now)
        # Pid files of a dead dockerd / its managed containerd may name zombies;
        # dockerd then refuses to start or waits ~15s on a containerd that is gone.
        for pf in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
            if [ -e "$pf" ] && ! pid_alive "$(cat "$pf" 2>/dev/null || echo 0)"; then
                $SUDO rm -f "$pf"
            fi
        done
        if [ -n "${CREDITGYM_STORAGE_DRIVER:-}" ]; then
            drivers="$CREDITGYM_STORAGE_DRIVER"
        else
            drivers="overlay2 vfs"
        fi
        ok=""
        for drv in $drivers; do
            start_dockerd "$drv"
            if wait_engine; then ok="$drv"; break; fi
            say "dockerd did not come up with storage driver $drv"
            if dockerd_alive; then $SUDO kill "$DOCKERD_PID" 2>/dev/null || true; sleep 2; fi
        done
        if [ -z "$ok" ]; then
            echo "---- last lines of $DOCKERD_LOG ----" >&2
            tail -n 40 "$DOCKERD_LOG" >&2 || true
            die "Docker engine did not start (tried: $drivers). See $DOCKERD_LOG."
        fi
        say "engine up in $(( $(now) - t0 ))s (storage driver $ok)"
    fi
fi
say "$("$DOCKER" version --format 'client {{.Client.Version}} (API {{.Client.APIVersion}}), server {{.Server.Version}} (API {{.Server.APIVersion}})' 2>/dev/null || echo 'version query failed')"

# ---------------------------------------------------------------- 3. base image
debian_mirror() {
    if [ -n "${CREDITGYM_DEBIAN_MIRROR:-}" ]; then echo "$CREDITGYM_DEBIAN_MIRROR"; return; fi
    local m=""
    # deb822 sources: first URIs of a stanza whose Suites include "$SUITE" itself.
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        m="$(awk -v s="$SUITE" '
            /^[ \t]*$/ { if (u != "" && hit) { print u; exit } u=""; hit=0; next }
            tolower($1) == "uris:"   { u=$2 }
            tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == s) hit=1 }
            END { if (u != "" && hit) print u }' "$f" | head -n1)"
        [ -n "$m" ] && { echo "$m"; return; }
    done
    # one-line sources
    m="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
         awk -v s="$SUITE" '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i == s) { print (substr($2,1,1) == "[" ? $3 : $2); exit } }' |
         head -n1)"
    echo "${m:-http://deb.debian.org/debian}"
}

if "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    say "base image $BASE_IMAGE present"
else
    MIRROR="$(debian_mirror)"
    say "building base image $BASE_IMAGE: debootstrap --variant=minbase $SUITE from $MIRROR"
    t0=$(now)
    ROOTFS="$(mktemp -d /var/tmp/creditgym-rootfs.XXXXXX)"
    cleanup() {
        # Unmount anything debootstrap may have left mounted (proc, sys, dev...)
        # before deleting, and never cross into another filesystem.
        local mp
        for mp in $(awk -v r="$ROOTFS" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r); do
            $SUDO umount -l "$mp" 2>/dev/null || true
        done
        $SUDO rm -rf --one-file-system "$ROOTFS"
    }
    trap cleanup EXIT
    if ! $SUDO debootstrap --variant=minbase --include="$INCLUDE_PKGS" \
            "$SUITE" "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1; then
        tail -n 30 "$ROOTFS.log" >&2
        tail -n 30 "$ROOTFS/debootstrap/debootstrap.log" >&2 2>/dev/null || true
        rm -f "$ROOTFS.log"
        die "debootstrap failed"
    fi
    rm -f "$ROOTFS.log"
    # Trim: package caches and apt lists are useless offline.
    $SUDO rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/cache/apt/*.bin \
                 "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/log/*.log
    say "debootstrap done in $(( $(now) - t0 ))s; importing"
    $SUDO tar -C "$ROOTFS" --numeric-owner -c . | "$DOCKER" import \
        --change 'LABEL org.creditgym.managed=true' \
        --change "LABEL org.creditgym.base.suite=$SUITE" \
        --change "LABEL org.creditgym.base.packages=$INCLUDE_PKGS" \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
        --change 'WORKDIR /' \
        --change 'CMD ["/bin/bash"]' \
        - "$BASE_IMAGE" >/dev/null
    cleanup
    trap - EXIT
    say "base image $BASE_IMAGE built in $(( $(now) - t0 ))s ($("$DOCKER" image inspect -f '{{.Size}}' "$BASE_IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"
fi

# ---------------------------------------------------------------- smoke
# One container, no network, with the limits and isolation the sandboxes use (DockerSandbox).
if out="$("$DOCKER" run --rm --init --network none --memory 256m --pids-limit 256 --cpus 1 \
            --cap-drop ALL --security-opt no-new-privileges --ulimit fsize=2147483648 \
            --label org.creditgym.managed=true "$BASE_IMAGE" \
            python3 -c 'import sys; print("py" + sys.version.split()[0])' 2>&1)"; then
    say "smoke ok: $out in $BASE_IMAGE (network none, limits, --init, --cap-drop ALL, fsize ulimit accepted)"
else
    echo "$out" >&2
    die "a container from $BASE_IMAGE did not run (see above)"
fi
say "ready"
