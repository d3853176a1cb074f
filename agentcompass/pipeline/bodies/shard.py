"""The body of the shard stage (scope ``shard``): one slice of a large request, built by an inner Snakemake
(``pipeline.shards``), and its record, shard.json."""

from __future__ import annotations

import os
import time
from pathlib import Path

from agentcompass import layout, spend
from agentcompass._util import aio
from agentcompass._util.jsonio import read_json
from agentcompass.stages import LAST_ATTEMPT_STAGE, stage

from .. import engine, lifecycle, provenance, shards
from ..engine import WorkflowError
from ..files import ShardRecord
from ..jobs import ShardJob


def shard(job: ShardJob) -> None:
    """Build one slice with an inner Snakemake; record what it left in shard.json."""
    services = job.services
    assert services is not None  # a shard's job runs under Snakemake
    req, index, targets, events = job.request, job.index, services.targets, services.events
    events.announce(req)  # how many attempts its shards build, before the first one starts
    started = time.monotonic()
    attempts = targets.shard_slice(req, index)
    workflow = services.snakemake
    threads = services.shards.job_threads(job.threads)
    argv = shards.inner_argv(workflow, threads, services.resources.claims(job.resources),
                             shards.forced_rules(workflow), targets.attempt_files(req, attempts))
    # on a cluster this job is one SLURM job: its inner run records that job in every output.json
    where = provenance.here()
    # the outer run's invocation, also when this job is a cluster job of its own
    env = shards.inner_env(req.namespace, req.run_id, index, events.invocation)
    env[lifecycle.PARENT_ENV] = str(os.getpid())
    if where["slurm_job_id"]:
        env[provenance.JOB_ID_ENV] = where["slurm_job_id"]
    code = shards.run_inner(argv, env, Path(job.log), fork=engine.is_main_process(workflow))
    if code != 0:
        reason = aio.stopping() or spend.over_budget(req.execution.budget, job.run, services.runtime.budget,
                                                     req.metadata.request_name)
        if reason is not None:  # stopped, or it started no more attempts once a budget was spent
            if aio.stopping() is None:
                lifecycle.budget_spent(workflow, reason)
            raise aio.Stopped(reason)
        raise WorkflowError(
            f"shard {index} of request {req.metadata.request_name!r}: its inner Snakemake exited with "
            f"{code}; the jobs that failed are named in {job.log}. Finished attempts are kept: "
            f"run again to retry the rest."
        )
    events.shard_built(req, index, attempts)
    counts: dict[str, int] = {}
    last_stage = stage(LAST_ATTEMPT_STAGE)
    for segment, attempt in attempts:
        result = read_json(layout.attempt_file(job.run, segment, attempt, last_stage))
        counts[result["status"]] = counts.get(result["status"], 0) + 1
    first, last = attempts[0], attempts[-1]
    # the generation first: shard.json appearing means the shard is current
    shards.hold(layout.generation_file(job.run, index), int(job.params.generation))
    job.write("shard", ShardRecord(
        request_name=req.metadata.request_name, shard=index, attempts=len(attempts),
        first=f"{first[0]}/{first[1]}", last=f"{last[0]}/{last[1]}", counts=counts,
        host=where["host"], seconds=round(time.monotonic() - started, 3),
        slurm_job_id=where["slurm_job_id"],
    ))
