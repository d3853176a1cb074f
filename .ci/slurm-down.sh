#!/usr/bin/env bash
# Stop the cluster .ci/slurm-up.sh STATE_DIR started: cancel its jobs (the tests
# should have left none: any found is reported), stop slurmd, slurmctld and
# the munged it started, put back the slurm.conf it replaced, and remove STATE_DIR.
set -uo pipefail

state=${1:?usage: slurm-down.sh STATE_DIR}
[ -d "$state" ] || exit 0
say() { echo "slurm-down: $*" >&2; }

if [ -f "$state/run/slurmctld.pid" ] && command -v squeue >/dev/null; then
    left=$(squeue -h -t PENDING,RUNNING -o '%i %j' 2>/dev/null)
    if [ -n "$left" ]; then
        say "WARNING: the tests left $(echo "$left" | wc -l) SLURM job(s) behind; cancelling them"
        echo "$left" | sed 's/^/  /' >&2
        scancel --user="$(id -un)" 2>/dev/null
    fi
    scontrol shutdown 2>/dev/null
fi
stop() {  # stop the process in pid file $1, at most 10 s, then kill it
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.25; done
    say "$2 did not stop in 10 s; killing it"
    kill -KILL "$pid" 2>/dev/null
}
stop "$state/run/slurmd.pid" slurmd
stop "$state/run/slurmctld.pid" slurmctld
[ "$(cat "$state/munged-ours" 2>/dev/null)" = yes ] && stop /run/munge/munged.pid munged

if [ -e "$state/slurm.conf.before" ]; then
    cp -p "$state/slurm.conf.before" /etc/slurm/slurm.conf
elif grep -q "agentcompass .ci/slurm-up.sh for $state" /etc/slurm/slurm.conf 2>/dev/null; then
    rm -f /etc/slurm/slurm.conf
fi
rm -rf "$state"
say "cluster stopped"
