#!/usr/bin/env bash
# Start a single-node SLURM cluster on this machine for the test suite's cluster test.
#
#   .ci/slurm-up.sh STATE_DIR    (then: source STATE_DIR/env; stop with .ci/slurm-down.sh STATE_DIR)
#
# slurmctld, slurmd and munged run as root (munged as munge) with their state,
# logs and pid files under STATE_DIR. The config must live at
# /etc/slurm/slurm.conf: the Snakemake SLURM plugin strips every SLURM_*
# variable inside a job, so a SLURM_CONF elsewhere would be lost there. No
# accounting database: jobs are seen with squeue, which keeps a finished job
# for MinJobAge seconds. cgroups are off (proctrack/linuxproc): this sandbox has
# none to give. task/affinity binds each job to the CPUs it asked for, as clusters
# do: a job that asks 1 CPU sees 1, so the tests see what a user's jobs see.
# Measured here: about 12 s from nothing to an idle node.
# Exit status 0: STATE_DIR/env exports AGENTCOMPASS_SLURM=1 and the partition's name.
set -euo pipefail

state=${1:?usage: slurm-up.sh STATE_DIR}
mkdir -p "$state"
state=$(cd "$state" && pwd)
partition=${AGENTCOMPASS_SLURM_PARTITION:-debug}

say() { echo "slurm-up: $*" >&2; }

if [ "$(id -u)" != 0 ]; then
    say "slurmctld and slurmd need root here"
    exit 1
fi
need=()
command -v slurmctld >/dev/null || need+=(slurmctld)
command -v slurmd >/dev/null || need+=(slurmd)
command -v sbatch >/dev/null && command -v squeue >/dev/null || need+=(slurm-client)
command -v munged >/dev/null || [ -x /usr/sbin/munged ] || need+=(munge)
if [ ${#need[@]} -gt 0 ]; then
    "$(dirname "$0")/apt-install.sh" "$state/apt.log" "${need[@]}"
fi

started=$(date +%s%N)
mkdir -p "$state/ctld" "$state/d" "$state/log" "$state/run" /run/munge /etc/slurm
chown munge:munge /run/munge /var/log/munge /var/lib/munge
[ -s /etc/munge/munge.key ] || /usr/sbin/mungekey -c
# remember a slurm.conf this script replaces, so slurm-down puts it back
if [ -e /etc/slurm/slurm.conf ] && [ ! -e "$state/slurm.conf.before" ]; then
    cp -p /etc/slurm/slurm.conf "$state/slurm.conf.before"
fi

host=$(hostname -s)
cpus=$(nproc)
memory=$(( $(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p') * 95 / 100 ))
cat >/etc/slurm/slurm.conf <<CONF
# written by agentcompass .ci/slurm-up.sh for $state
ClusterName=agentcompass-ci
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/d
SlurmctldPidFile=$state/run/slurmctld.pid
SlurmdPidFile=$state/run/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# without it one job asking no memory takes the node's whole memory
DefMemPerCPU=1000
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
# squeue (the status command without an accounting database) sees a finished job this long
MinJobAge=300
KillWait=5
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=$partition Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF

# a munged already running (the machine's own) serves this cluster too, and is left running
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    echo no >"$state/munged-ours"
else
    runuser -u munge -- /usr/sbin/munged
    echo yes >"$state/munged-ours"
fi
/usr/sbin/slurmctld
/usr/sbin/slurmd
for _ in $(seq 120); do
    sinfo -h -N -o %T 2>/dev/null | grep -qx idle && break
    sleep 0.5
done
if ! sinfo -h -N -o %T 2>/dev/null | grep -qx idle; then
    say "the node did not become idle; the logs end with:"
    tail -10 "$state/log/slurmctld.log" "$state/log/slurmd.log" >&2 || true
    exit 1
fi
if ! timeout 60 srun -N1 true; then
    say "a test job (srun true) did not run"
    exit 1
fi
say "node $host ($cpus CPUs, $memory MB) idle in partition $partition after $((($(date +%s%N) - started) / 1000000)) ms"

cat >"$state/env" <<ENV
export AGENTCOMPASS_SLURM=1
export AGENTCOMPASS_SLURM_PARTITION=$partition
ENV
