"""Whether a shard's SLURM job can ever start, checked before it is submitted.

SLURM queues a job that asks more CPUs than any node of its partition has, or
more time than the partition allows, and keeps it pending for ever (reason
``PartitionConfig`` or ``PartitionTimeLimit``) unless the cluster sets
``EnforcePartLimits``; the Snakemake driver then waits for ever too. Asking
more memory than a node has is refused by sbatch itself, so it needs no check
here.

``check_shard_job`` computes what the SLURM executor plugin will ask for a
shard job (its partition, ``--cpus-per-task`` and ``--time``), asks ``sinfo``
what the partition offers, and raises a ``WorkflowError`` naming the profile
setting to edit. It only stops a run it is sure can never start: when sinfo
cannot answer, the job is submitted as before.
"""

from __future__ import annotations

import functools
import re
import subprocess
from typing import NamedTuple

from agentcompass.stages import sole

from . import engine
from .engine import WorkflowError

SHARD_RULE = sole(slices_attempts=True).name
# resources the plugin turns into the sbatch options checked here
_ASKED = ("cpus_per_task", "runtime", "slurm_partition", "slurm_cluster", "cluster", "clusters")


class JobRequest(NamedTuple):
    """What one cluster job asks SLURM for, as the plugin will submit it."""

    partition: str | None  # None: the cluster's default partition
    cpus: int
    cpus_from: str  # the profile setting the CPU count comes from
    minutes: int | None
    other_cluster: bool  # slurm_cluster set: sinfo here does not describe it


class Partition(NamedTuple):
    name: str
    most_cpus: int  # of its largest node
    max_minutes: int | None  # None: no limit


def plugin_cpus(resources, threads: int) -> tuple[int, str]:
    """The plugin's ``--cpus-per-task`` (snakemake-executor-plugin-slurm 2.8.0):
    ``cpus_per_task`` when given (at least 1; below 0 no option, and SLURM gives 1),
    else the job's threads."""
    asked = resources.get("cpus_per_task")
    if asked is not None and not isinstance(asked, bool):
        try:
            asked = int(asked)
        except (TypeError, ValueError):
            asked = 0
        return max(1, asked), "set-resources: shard: cpus_per_task"
    return max(1, int(threads)), "set-threads: shard"


def shard_job(workflow, wildcards) -> JobRequest:
    """What the plugin will ask for the shard job of ``wildcards``: the rule's resources
    evaluated as Snakemake evaluates them for the job (default-resources, then the
    profile's set-resources and set-threads). Resources the check does not read are
    left unevaluated: some read the job's input sizes, which are unknown before it runs."""
    resources = engine.rule_resources(workflow, SHARD_RULE, wildcards, _ASKED)
    cpus, cpus_from = plugin_cpus(resources, resources["_cores"])
    runtime = resources.get("runtime")
    partition = resources.get("slurm_partition")
    return JobRequest(
        partition=str(partition) if partition else None,
        cpus=cpus,
        cpus_from=cpus_from,
        minutes=int(runtime) if isinstance(runtime, (int, float)) and runtime > 0 else None,
        other_cluster=any(resources.get(k) for k in ("slurm_cluster", "cluster", "clusters")),
    )


def sinfo_minutes(limit: str) -> int | None:
    """A partition's time limit as sinfo prints it (``30:00``, ``2:00:00``,
    ``1-12:00:00``, ``infinite``) in whole minutes; None when there is none."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", limit.strip())
    if not match:
        return None  # infinite, UNLIMITED, n/a
    days, first, second, third = match.groups()
    if third is not None:  # [days-]hours:minutes:seconds
        hours, minutes, seconds = int(first), int(second), int(third)
    elif second is not None and days is not None:  # days-hours:minutes
        hours, minutes, seconds = int(first), int(second), 0
    elif second is not None:  # minutes:seconds
        hours, minutes, seconds = 0, int(first), int(second)
    elif days is not None:  # days-hours
        hours, minutes, seconds = int(first), 0, 0
    else:  # minutes
        hours, minutes, seconds = 0, int(first), 0
    return (int(days or 0) * 24 + hours) * 60 + minutes + (1 if seconds else 0)


def parse_sinfo(name: str, text: str) -> Partition | None:
    """``sinfo -h -N -p NAME -o '%c %l'``: one line per node, its CPUs and the partition's limit."""
    rows = [line.split() for line in text.splitlines() if line.strip()]
    cpus = [int(row[0].rstrip("+")) for row in rows if row and row[0].rstrip("+").isdigit()]
    if not cpus:
        return None
    return Partition(name, max(cpus), sinfo_minutes(rows[0][1]) if len(rows[0]) > 1 else None)


def _sinfo(*args: str) -> str | None:
    try:
        done = subprocess.run(["sinfo", *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


@functools.lru_cache(maxsize=None)
def partition(name: str | None) -> Partition | None:
    """What partition ``name`` (None: the default one) offers, from sinfo; None when
    sinfo does not answer. A partition sinfo does not know has no nodes: ``most_cpus`` 0."""
    if name is None:
        listing = _sinfo("-h", "-o", "%P")
        if listing is None:
            return None
        defaults = [p.rstrip("*") for p in listing.split() if p.endswith("*")]
        if not defaults:
            return None  # the plugin then submits without -p, and SLURM decides
        name = defaults[0]
    text = _sinfo("-h", "-N", "-p", name, "-o", "%c %l")
    if text is None:
        return None
    return parse_sinfo(name, text) or Partition(name, 0, None)


def why_never_starts(job: JobRequest, part: Partition) -> str | None:
    """The sentence that stops the run, or None when some node of the partition can run the job."""
    where = f"partition {part.name!r}"
    pick = "or pick a partition with larger nodes (default-resources: slurm_partition)"
    if part.most_cpus == 0:
        return (
            f"A shard's cluster job would be submitted to {where}, which has no nodes "
            f"(sinfo -p {part.name} lists none). Set default-resources: slurm_partition in "
            f"your SLURM profile to one of the partitions sinfo lists."
        )
    if job.cpus > part.most_cpus:
        return (
            f"A shard's cluster job asks SLURM for {job.cpus} CPUs ({job.cpus_from} in your "
            f"SLURM profile), but no node of {where} has more than {part.most_cpus} "
            f"(sinfo -N -p {part.name} -o '%N %c'), so it would wait in the queue for ever. "
            f"Set set-resources: shard: cpus_per_task to {part.most_cpus} or less "
            f"(attempts mostly wait on a model: a shard needs few CPUs), {pick}."
        )
    if job.minutes is not None and part.max_minutes is not None and job.minutes > part.max_minutes:
        return (
            f"A shard's cluster job asks SLURM for {job.minutes} minutes (default-resources: "
            f"runtime in your SLURM profile), but {where} allows at most {part.max_minutes} "
            f"(sinfo -p {part.name} -o '%P %l'), so it would wait in the queue for ever. "
            f"Set runtime to {part.max_minutes} or less, or pick a partition that allows "
            f"longer jobs (default-resources: slurm_partition)."
        )
    return None


@functools.lru_cache(maxsize=None)
def _verdict(job: JobRequest) -> str | None:
    if job.other_cluster:
        return None  # sinfo here describes this host's cluster, not the one named
    part = partition(job.partition)
    return why_never_starts(job, part) if part is not None else None


def check_shard_job(workflow, wildcards) -> None:
    """Stop the run before a shard job that can never start is submitted.

    Call it in the submitting Snakemake (not in a cluster job, not in an inner
    run) when the shard job is built, e.g. from the shard rule's input function.
    sinfo is asked once per partition.
    """
    why = _verdict(shard_job(workflow, wildcards))
    if why:
        raise WorkflowError(why)
