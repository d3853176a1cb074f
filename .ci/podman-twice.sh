#!/usr/bin/env bash
# Check that .ci/podman-up.sh services run side by side on one machine: two rootless ones at once,
# each with its own user and STATE_DIR, each running containers while the other does, one still
# serving after the other stopped; and that a second service as root is refused while one runs.
# Not part of .ci/run (it costs a minute): run it by hand, as root, after changing the Podman scripts.
#
#   .ci/podman-twice.sh [BASE]    (state folders BASE-a, BASE-b, BASE-root, BASE-root2; default a temporary folder)
set -uo pipefail
cd "$(dirname "$0")/.."

made=
[ -n "${1:-}" ] || { made=$(mktemp -d) && chmod 711 "$made"; }  # the rootless users reach their own folder in it
base=${1:-$made/podman}
a=$base-a b=$base-b root=$base-root root2=$base-root2
logs=$(mktemp -d)  # the services' start logs, kept when a check fails
failed=0
say() { echo "podman-twice: $*" >&2; }
fail() { say "FAILED: $*"; failed=1; }
trap '.ci/podman-down.sh "$a"; .ci/podman-down.sh "$b"; .ci/podman-down.sh "$root"; .ci/podman-down.sh "$root2"; [ -z "$made" ] || rmdir "$made"' EXIT
pm() { (source "$1/env" && cd / && eval "pm_command=($(cat "$1/podman-command"))" && "${pm_command[@]}" "${@:2}"); }

# both at once, from the first step
.ci/podman-up.sh "$a" --rootless >"$logs/a.log" 2>&1 & up_a=$!
.ci/podman-up.sh "$b" --rootless >"$logs/b.log" 2>&1 & up_b=$!
wait "$up_a" || { fail "the first rootless service did not start:"; tail -5 "$logs/a.log" >&2; }
wait "$up_b" || { fail "the second rootless service did not start:"; tail -5 "$logs/b.log" >&2; }
[ "$failed" = 0 ] || { say "the services' start logs: $logs"; exit 1; }
user_a=$(cat "$a/user" 2>/dev/null) user_b=$(cat "$b/user" 2>/dev/null)
[ -n "$user_a" ] && [ "$user_a" != "$user_b" ] || fail "the two services share their user ($user_a, $user_b)"
range_a=$(grep "^$user_a:" /etc/subuid | cut -d: -f2) range_b=$(grep "^$user_b:" /etc/subuid | cut -d: -f2)
[ -n "$range_a" ] && [ "$range_a" != "$range_b" ] || fail "the two users share their id range ($range_a, $range_b)"

# each runs a container while the other's runs; each sees only its own
pm "$a" run -d --name twice-a local/busybox:latest sleep 600 >/dev/null || fail "no container on the first service"
pm "$b" run -d --name twice-b local/busybox:latest sleep 600 >/dev/null || fail "no container on the second service"
[ "$(pm "$a" ps --format '{{.Names}}')" = twice-a ] || fail "the first service lists $(pm "$a" ps --format '{{.Names}}')"
[ "$(pm "$b" ps --format '{{.Names}}')" = twice-b ] || fail "the second service lists $(pm "$b" ps --format '{{.Names}}')"

# stopping one leaves the other serving, its container running
.ci/podman-down.sh "$a"
[ -z "$(pgrep -u "$user_a" 2>/dev/null)" ] || fail "processes of $user_a outlived its podman-down"
[ "$(pm "$b" ps --format '{{.Names}}')" = twice-b ] || fail "the second service lost its container when the first stopped"
[ "$(pm "$b" run --rm --network none local/busybox:latest echo still)" = still ] || fail "the second service no longer runs containers"

# as root: one at a time, the second refused with the reason
if .ci/podman-up.sh "$root" >"$logs/root.log" 2>&1; then
    if .ci/podman-up.sh "$root2" >"$logs/root2.log" 2>&1; then
        fail "a second service as root started beside the first"
    else
        grep -q "runs already" "$logs/root2.log" || { fail "the second service as root failed without saying why:"; tail -5 "$logs/root2.log" >&2; }
    fi
    [ "$(pm "$b" run --rm --network none local/busybox:latest echo beside)" = beside ] || fail "the rootless service stopped serving beside a root one"
else
    fail "the service as root did not start:"; tail -5 "$logs/root.log" >&2
fi
if [ "$failed" = 0 ]; then
    say "two rootless services ran at once, and a second one as root was refused"
    rm -rf "$logs"
else
    say "the services' start logs: $logs"
fi
exit "$failed"
