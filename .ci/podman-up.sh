#!/usr/bin/env bash
# Start Podman's Docker-compatible API service for the test suite, with storage of its own, and
# import the image the tests use: the docker environment then runs on Podman, with no Docker daemon.
#
#   .ci/podman-up.sh STATE_DIR [--rootless]   (then: source STATE_DIR/env; stop with .ci/podman-down.sh STATE_DIR)
#
# Everything lives under STATE_DIR, on local disk: the settings (containers.conf, storage.conf,
# registries.conf, read through CONTAINERS_CONF, CONTAINERS_STORAGE_CONF and
# CONTAINERS_REGISTRIES_CONF: nothing under /etc/containers changes), the image store, the run
# root, the network definitions and the API socket. With --rootless the service runs as an
# unprivileged user of its own (agentcompass-podman-HASH, HASH from STATE_DIR's path, created with
# /etc/subuid and /etc/subgid ranges) in user namespaces, as on a cluster node; without it, as root.
# Rootless services run side by side, each with its own user and STATE_DIR; a second service as
# root is refused while one runs (they would share the podman0 bridge and its addresses).
#
# The settings this machine kind needs: runtime runc, cgroup manager cgroupfs (no systemd), and
# explicit nofile/nproc ulimits (podman cannot raise the defaults here: "error setting rlimit").
# Nothing is pulled: the test image is a 2 MB busybox made with `podman import` from busybox-static,
# and no registry is reached: registries.conf searches none for a short name and blocks the public
# ones, and the service's HTTP(S) proxy is a closed port on loopback (NO_PROXY empty), so a pull of a
# missing image fails on this machine ("connection refused" from 127.0.0.1:9, or "blocked").
# The service's bridge is podman0 (root) or lives in the user's namespaces (rootless); docker0
# and the firewall rules of a Docker engine are never touched.
# Exit status 0: STATE_DIR/env exports DOCKER_HOST, AGENTCOMPASS_TEST_IMAGE and
# AGENTCOMPASS_TEST_ENGINE (podman-root or podman-rootless), and AGENTCOMPASS_TEST_GLIBC_IMAGE.
set -euo pipefail

state=${1:?usage: podman-up.sh STATE_DIR [--rootless]}
mode=root
[ "${2:-}" = --rootless ] && mode=rootless
mkdir -p "$state"
state=$(cd "$state" && pwd)
image=${AGENTCOMPASS_TEST_IMAGE:-local/busybox:latest}
glibc_image=${AGENTCOMPASS_TEST_GLIBC_IMAGE:-local/glibc:latest}
# the rootless service's user: one per STATE_DIR (a user name has at most 32 characters)
user=agentcompass-podman-$(printf %s "$state" | sha256sum | cut -c1-8)
# where no route leads: every pull the service attempts goes there and is refused at once
proxy=http://127.0.0.1:9

say() { echo "podman-up: $*" >&2; }

if [ "$(id -u)" != 0 ]; then
    say "this script needs root (it installs packages, and starts the rootless service as another user)"
    exit 1
fi
need=()
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/podman/netavark ] || need+=(netavark)
command -v iptables >/dev/null || need+=(iptables)
command -v newuidmap >/dev/null || need+=(uidmap)
command -v slirp4netns >/dev/null || need+=(slirp4netns)
[ -x /bin/busybox ] && { ldd /bin/busybox 2>&1 || true; } | grep -Eq "not a dynamic|statically linked" || need+=(busybox-static)
if [ ${#need[@]} -gt 0 ]; then
    "$(dirname "$0")/apt-install.sh" "$state/apt.log" "${need[@]}"
fi

if [ "$mode" = root ] && iptables -S FORWARD 2>/dev/null | grep -q agentcompass-podman-ci; then
    say "a Podman service as root that podman-up.sh started runs already (its FORWARD rules, comment"
    say "agentcompass-podman-ci, are in place): two would share the podman0 bridge and its addresses."
    say "Stop it first (.ci/podman-down.sh ITS_STATE_DIR), or start this one with --rootless."
    exit 1
fi

echo "$mode" >"$state/mode"
cat /proc/sys/net/ipv4/ip_forward >"$state/ip_forward-before"

run_as=()
if [ "$mode" = rootless ]; then
    echo "$user" >"$state/user"
    # one podman-up at a time from here: two would give their users the same id range
    exec 9>/run/agentcompass-podman-up.lock
    flock 9
    if ! id -u "$user" >/dev/null 2>&1; then
        useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$user"
        echo yes >"$state/user-created"
    fi
    # a range of 65536 ids for the user's namespaces, past every range already given
    for f in /etc/subuid /etc/subgid; do
        touch "$f"
        if ! grep -q "^$user:" "$f"; then
            start=$(awk -F: 'BEGIN { m = 100000 } { if ($2 + $3 > m) m = $2 + $3 } END { print m }' "$f")
            echo "$user:$start:65536" >>"$f"
            echo "$f" >>"$state/subid-added"
        fi
    done
    # the user reaches its own folder under STATE_DIR, nothing else of it
    chmod 711 "$state"
    home="$state/home"
    mkdir -p "$home" "$state/xdg"
    chown "$user": "$home" "$state/xdg"
    chmod 700 "$state/xdg"
    # slirp4netns gives the user's network namespace its way out through /dev/net/tun, which
    # every user may open on a usual system (mode 0666) but not on this machine kind
    # (its mode before, for the last rootless service's podman-down.sh to restore)
    if [ -c /dev/net/tun ] && ! runuser -u "$user" -- test -r /dev/net/tun -a -w /dev/net/tun; then
        [ -s /run/agentcompass-podman-tun-mode ] || stat -c %a /dev/net/tun >/run/agentcompass-podman-tun-mode
        chmod 666 /dev/net/tun
    fi
    exec 9>&-
    run_as=(runuser -u "$user" --)
    store="$home/storage"
    runroot="$state/xdg/containers"
    sock="$home/podman.sock"
else
    home="$state"
    store="$state/storage"
    runroot="$state/run"
    sock="$state/podman.sock"
fi

# the settings, read through the environment by every podman command below and by the service
# (the ulimits: podman's own defaults are higher than a process here may set, and so is this
# shell's hard limit of open files: 16384 each, or less where the hard limit is lower)
nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
[ "$nofile" = unlimited ] || [ "$nofile" -gt 16384 ] && nofile=16384
[ "$nproc" = unlimited ] || [ "$nproc" -gt 16384 ] && nproc=16384
cat >"$state/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
# the service's proxy settings (below) are for its pulls only, never a container's environment
http_proxy = false

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$home/events.log"
tmp_dir = "$runroot/tmp"
static_dir = "$store/libpod"
volume_path = "$store/volumes"

[network]
network_backend = "netavark"
network_config_dir = "$home/networks"
EOF
cat >"$state/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$store"
runroot = "$runroot"
EOF
# no registry is searched for a short name, the public ones are blocked, and the proxy (below)
# refuses the rest: images must be local
{
    echo 'unqualified-search-registries = []'
    echo 'short-name-mode = "disabled"'
    for registry in docker.io registry-1.docker.io index.docker.io quay.io ghcr.io gcr.io registry.k8s.io \
            public.ecr.aws mcr.microsoft.com registry.fedoraproject.org registry.access.redhat.com registry.redhat.io; do
        printf '\n[[registry]]\nlocation = "%s"\nblocked = true\n' "$registry"
    done
} >"$state/registries.conf"
chmod 644 "$state/containers.conf" "$state/storage.conf" "$state/registries.conf"

engine_env=(env "HOME=$home" "CONTAINERS_CONF=$state/containers.conf"
            "CONTAINERS_STORAGE_CONF=$state/storage.conf" "CONTAINERS_REGISTRIES_CONF=$state/registries.conf"
            "HTTP_PROXY=$proxy" "HTTPS_PROXY=$proxy" "http_proxy=$proxy" "https_proxy=$proxy" NO_PROXY= no_proxy=)
[ "$mode" = rootless ] && engine_env+=("XDG_RUNTIME_DIR=$state/xdg" "XDG_CONFIG_HOME=$home/.config" "XDG_DATA_HOME=$home/.local/share")
pm() { (cd / && "${run_as[@]}" "${engine_env[@]}" podman "$@"); }
printf '%q ' "${run_as[@]}" "${engine_env[@]}" podman >"$state/podman-command"

# the service, in its own session so that podman-down can end it and everything it started
(cd / && exec setsid "${run_as[@]}" "${engine_env[@]}" podman system service --time=0 "unix://$sock") \
    >"$state/service.log" 2>&1 &
echo $! >"$state/service.pid"
export DOCKER_HOST="unix://$sock"

started=$(date +%s%N)
for _ in $(seq 120); do
    [ -S "$sock" ] && python3 - "$sock" <<'PY' 2>/dev/null && break
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(b"GET /_ping HTTP/1.0\r\n\r\n"); assert b"OK" in s.recv(4096)
PY
    sleep 0.25
done
if ! [ -S "$sock" ]; then
    say "the service did not answer; its log ends with:"
    tail -20 "$state/service.log" >&2
    exit 1
fi
say "podman $(pm version --format '{{.Server.Version}}' 2>/dev/null || pm --version) ($mode) answering at $DOCKER_HOST after $((($(date +%s%N) - started) / 1000000)) ms"

# the test images, imported from this machine's files (.ci/test-rootfs.sh): busybox, and glibc
for kind in busybox glibc; do
    name=$image
    path=/bin
    [ "$kind" = glibc ] && name=$glibc_image path=/bin:/usr/bin
    rootfs=$(mktemp -d)
    .ci/test-rootfs.sh "$kind" "$rootfs"
    tar -C "$rootfs" -c . >"$state/rootfs.tar"
    rm -rf "$rootfs"
    chmod 644 "$state/rootfs.tar"
    pm import --change "ENV PATH=$path" --change 'CMD ["sh"]' "$state/rootfs.tar" "$name" >/dev/null
    rm -f "$state/rootfs.tar"
    if ! pm run --rm --network none "$name" true; then
        say "the test image $name does not run"
        exit 1
    fi
    say "imported $name"
done
if [ "$mode" = root ]; then
    # netavark makes the podman0 bridge with the first container on it and removes it with the
    # last: one idle container keeps it, so that a test's server on this machine can listen on
    # the bridge's address before any session starts
    pm run -d --name agentcompass-ci-bridge --network bridge "$image" sleep 2147483647 >/dev/null
    # netavark turns ip_forward on and masquerades its subnet: as docker-up.sh's engine, the
    # containers here reach this machine and each other, and nothing beyond it (podman-down
    # removes these two rules and restores ip_forward)
    subnet=$(pm network inspect podman --format '{{range .Subnets}}{{.Subnet}}{{end}}')
    echo "$subnet" >"$state/subnet"
    iptables -I FORWARD 1 -s "$subnet" ! -d "$subnet" -m comment --comment agentcompass-podman-ci -j DROP
    iptables -I FORWARD 1 -d "$subnet" ! -s "$subnet" -m comment --comment agentcompass-podman-ci -j DROP
fi

cat >"$state/env" <<EOF
export DOCKER_HOST=$DOCKER_HOST
export AGENTCOMPASS_TEST_IMAGE=$image
export AGENTCOMPASS_TEST_GLIBC_IMAGE=$glibc_image
export AGENTCOMPASS_TEST_ENGINE=podman-$mode
export AGENTCOMPASS_TEST_OFFLINE_ENGINE=1
EOF
