#!/usr/bin/env bash
# Stop the engine .ci/docker-up.sh STATE_DIR started, and remove what it left:
# containers (the tests should have left none: any found is reported), the
# docker0 bridge it created, its mounts and STATE_DIR.
set -uo pipefail

state=${1:?usage: docker-down.sh STATE_DIR}
[ -d "$state" ] || exit 0
say() { echo "docker-down: $*" >&2; }
export DOCKER_HOST="unix://$state/docker.sock"

if docker version >/dev/null 2>&1; then
    left=$(docker ps -aq --filter label=agentcompass=1)
    if [ -n "$left" ]; then
        say "WARNING: the tests left $(echo "$left" | wc -l) agentcompass container(s) behind; removing them"
        docker ps -a --filter label=agentcompass=1 --format '  {{.Names}} {{.Labels}}' >&2
        docker rm -f $left >/dev/null
    fi
fi

pid=$(cat "$state/dockerd.pid" 2>/dev/null || cat "$state/dockerd.launcher.pid" 2>/dev/null || true)
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    if kill -0 "$pid" 2>/dev/null; then
        say "dockerd did not stop in 15 s; killing it"
        kill -KILL "$pid"
    fi
fi
# the engine's own containerd and shims live under its exec root
for p in $(grep -l "$state" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
    [ "$p" = $$ ] || kill -KILL "$p" 2>/dev/null
done

if [ "$(cat "$state/bridge-existed" 2>/dev/null)" = no ] && ip link show docker0 >/dev/null 2>&1; then
    ip link delete docker0 2>/dev/null || say "could not remove the docker0 bridge"
fi
grep " $state" /proc/mounts | cut -d' ' -f2 | sort -r | while read -r mount; do
    umount -l "$mount" 2>/dev/null
done
rm -rf "$state"
say "engine stopped"
