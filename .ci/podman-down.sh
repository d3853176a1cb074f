#!/usr/bin/env bash
# Stop the Podman service .ci/podman-up.sh STATE_DIR started and remove what it made: its
# containers (the tests should have left none: any agentcompass one found is reported), pods,
# networks, images and storage, the podman0 bridge and the netavark firewall chains if this
# service made them, the rootless user's id ranges and user if podman-up added them, and STATE_DIR.
# Only this service's processes end: those of its own rootless user, and those naming STATE_DIR;
# another service that podman-up.sh started (each has its own) keeps running.
# docker0 and a Docker engine's firewall rules are never touched.
set -uo pipefail

state=${1:?usage: podman-down.sh STATE_DIR}
[ -d "$state" ] || exit 0
state=$(cd "$state" && pwd)
say() { echo "podman-down: $*" >&2; }
# the rootless user podman-up.sh gave this STATE_DIR (agentcompass-podman: a state of an older podman-up.sh)
user=$(cat "$state/user" 2>/dev/null || echo agentcompass-podman)

if [ -s "$state/podman-command" ]; then
    eval "pm_command=($(cat "$state/podman-command"))"
    pm() { (cd / && "${pm_command[@]}" "$@"); }
    left=$(pm ps -aq --filter label=agentcompass=1 2>/dev/null)
    if [ -n "$left" ]; then
        say "WARNING: the tests left $(echo "$left" | wc -l) agentcompass container(s) behind; removing them"
        pm ps -a --filter label=agentcompass=1 --format '  {{.Names}} {{.Labels}}' >&2
    fi
    pm pod rm -af >/dev/null 2>&1
    pm rm -af -t 0 >/dev/null 2>&1
    pm network prune -f >/dev/null 2>&1
    pm rmi -af >/dev/null 2>&1
fi

pid=$(cat "$state/service.pid" 2>/dev/null || true)
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    # the service leads a session of its own: end it and its children (conmon, the rootless namespace holder)
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL -- "-$pid" 2>/dev/null
fi
# what still runs with this state folder on its command line (conmon, slirp4netns, a catatonit pause process)
for p in $(grep -lF "$state/" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
    [ "$p" = $$ ] || kill -KILL "$p" 2>/dev/null
done
if [ "$(cat "$state/mode" 2>/dev/null)" = rootless ]; then
    # the rootless pause process holding the user's namespaces: the user is this service's alone
    pkill_pids=$(pgrep -u "$user" 2>/dev/null || true)
    for p in $pkill_pids; do kill -KILL "$p" 2>/dev/null; done
fi

subnet=$(cat "$state/subnet" 2>/dev/null || true)
if [ -n "$subnet" ]; then
    iptables -D FORWARD -s "$subnet" ! -d "$subnet" -m comment --comment agentcompass-podman-ci -j DROP 2>/dev/null
    iptables -D FORWARD -d "$subnet" ! -s "$subnet" -m comment --comment agentcompass-podman-ci -j DROP 2>/dev/null
fi
# a conmon of a service as root that still runs (a zombie one is gone already: its parent has not
# reaped it yet); a rootless service's run as its user, and use neither podman0 nor these chains
live_conmon() {
    for p in $(pgrep -x -u 0 conmon); do
        [ "$(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null)" = Z ] || return 0
    done
    return 1
}
# podman0 and the netavark chains exist only while a root service's containers are up; remove
# what is left of them when no other podman uses them (a bridge without ports)
if ip link show podman0 >/dev/null 2>&1 && [ -z "$(ls /sys/class/net/podman0/brif 2>/dev/null)" ] \
        && ! live_conmon; then
    ip link delete podman0 2>/dev/null || say "could not remove the podman0 bridge"
fi
if ! live_conmon; then
    for table in filter nat; do
        for chain in $(iptables -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^NETAVARK/ { print $2 }'); do
            iptables -t "$table" -S 2>/dev/null | awk -v c="$chain" '$1 == "-A" && $2 != c && / -j / && $0 ~ ("-j " c "( |$)")' \
                | while read -r rule; do eval "iptables -t $table ${rule/-A/-D}" 2>/dev/null; done
        done
        for chain in $(iptables -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^NETAVARK/ { print $2 }'); do
            iptables -t "$table" -F "$chain" 2>/dev/null
        done
        for chain in $(iptables -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^NETAVARK/ { print $2 }'); do
            iptables -t "$table" -X "$chain" 2>/dev/null
        done
    done
    before=$(cat "$state/ip_forward-before" 2>/dev/null || true)
    [ -n "$before" ] && echo "$before" >/proc/sys/net/ipv4/ip_forward 2>/dev/null
fi

grep -F " $state/" /proc/mounts | cut -d' ' -f2 | sort -r | while read -r mount; do
    umount -l "$mount" 2>/dev/null
done
[ -s "$state/tun-mode-before" ] && chmod "$(cat "$state/tun-mode-before")" /dev/net/tun
# /dev/net/tun's mode before the first rootless service made it usable: restored by the last one
if [ -s /run/agentcompass-podman-tun-mode ]; then
    others=$(ps -eo user:40= | sort -u | grep -xE 'agentcompass-podman(-[0-9a-f]+)?' | grep -vx "$user")
    if [ -z "$others" ]; then
        chmod "$(cat /run/agentcompass-podman-tun-mode)" /dev/net/tun && rm -f /run/agentcompass-podman-tun-mode
    fi
fi
for f in $(cat "$state/subid-added" 2>/dev/null); do
    sed -i "/^$user:/d" "$f"
done
[ "$(cat "$state/user-created" 2>/dev/null)" = yes ] && userdel "$user" 2>/dev/null
rm -rf "$state"
say "service stopped"
