#!/usr/bin/env bash
# Start a private Docker engine for the test suite and build the image its tests use.
#
#   .ci/docker-up.sh STATE_DIR    (then: source STATE_DIR/env; stop with .ci/docker-down.sh STATE_DIR)
#
# The engine keeps everything under STATE_DIR (socket, data root, exec root, log)
# and runs with --iptables=false --ip-forward=false: containers reach this
# machine over the bridge (all the tests need) and nothing beyond it, and the
# engine leaves no firewall rules behind. The test image is a 2 MB busybox
# built with `docker import` from busybox-static, and no registry is reached:
# the engine's HTTP(S) proxy is a closed port on loopback (NO_PROXY empty), so a
# pull of a missing image, or a build FROM one, fails at once on this machine
# ("proxyconnect tcp: dial tcp 127.0.0.1:9: connect: connection refused"; the
# engine still reaches a registry on loopback directly). The containers' own
# environment is not changed.
# Exit status 0: STATE_DIR/env exports DOCKER_HOST, AGENTCOMPASS_TEST_IMAGE and
# AGENTCOMPASS_TEST_GLIBC_IMAGE (the same busybox with a glibc userland, for the installed agents).
set -euo pipefail

state=${1:?usage: docker-up.sh STATE_DIR}
mkdir -p "$state"
image=${AGENTCOMPASS_TEST_IMAGE:-local/busybox:latest}
glibc_image=${AGENTCOMPASS_TEST_GLIBC_IMAGE:-local/glibc:latest}

say() { echo "docker-up: $*" >&2; }

need=()
command -v dockerd >/dev/null || need+=(docker.io)
# the image holds nothing but busybox: it must be the static build
[ -x /bin/busybox ] && { ldd /bin/busybox 2>&1 || true; } | grep -Eq "not a dynamic|statically linked" || need+=(busybox-static)
command -v ip >/dev/null || need+=(iproute2)
command -v nsenter >/dev/null && command -v unshare >/dev/null && command -v setpriv >/dev/null || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
    "$(dirname "$0")/apt-install.sh" "$state/apt.log" "${need[@]}"
fi
if [ "$(id -u)" != 0 ]; then
    say "dockerd needs root here"
    exit 1
fi

# remember whether the bridge existed, so docker-down removes only what this engine made
ip link show docker0 >/dev/null 2>&1 && echo yes >"$state/bridge-existed" || echo no >"$state/bridge-existed"

sock="$state/docker.sock"
proxy=http://127.0.0.1:9
env HTTP_PROXY=$proxy HTTPS_PROXY=$proxy http_proxy=$proxy https_proxy=$proxy NO_PROXY= no_proxy= \
    dockerd -H "unix://$sock" --data-root "$state/data" --exec-root "$state/exec" \
    --pidfile "$state/dockerd.pid" --iptables=false --ip-forward=false \
    >"$state/dockerd.log" 2>&1 &
echo $! >"$state/dockerd.launcher.pid"
export DOCKER_HOST="unix://$sock"

started=$(date +%s%N)
for _ in $(seq 120); do
    docker version >/dev/null 2>&1 && break
    sleep 0.25
done
if ! docker version >/dev/null 2>&1; then
    say "the engine did not answer; its log ends with:"
    tail -20 "$state/dockerd.log" >&2
    exit 1
fi
say "engine $(docker version --format '{{.Server.Version}}') answering at $DOCKER_HOST after $((($(date +%s%N) - started) / 1000000)) ms"

# the test images, imported from this machine's files (.ci/test-rootfs.sh): busybox, and glibc
for kind in busybox glibc; do
    name=$image
    path=/bin
    [ "$kind" = glibc ] && name=$glibc_image path=/bin:/usr/bin
    rootfs="$state/rootfs-$kind"
    .ci/test-rootfs.sh "$kind" "$rootfs"
    tar -C "$rootfs" -c . | docker import -c "ENV PATH=$path" -c 'CMD ["sh"]' - "$name" >/dev/null
    rm -rf "$rootfs"
    if ! docker run --rm --network none "$name" true; then
        say "the test image $name does not run"
        exit 1
    fi
    say "built $name"
done

cat >"$state/env" <<EOF
export DOCKER_HOST=$DOCKER_HOST
export AGENTCOMPASS_TEST_IMAGE=$image
export AGENTCOMPASS_TEST_GLIBC_IMAGE=$glibc_image
export AGENTCOMPASS_TEST_OFFLINE_ENGINE=1
EOF
