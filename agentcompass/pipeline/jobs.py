"""The stage calls of the rules' ``run:`` blocks: each job logs, records and stops the same way.

Around every stage call:

- a run that is stopping starts nothing (``aio.Stopped``);
- each output is recorded as finished just before it appears (``recovery``
  says why), so a kill at any moment loses only unfinished work;
- a failing stage's traceback, scrubbed of the key, goes to its log file;
- temporary files an earlier, interrupted write of its outputs left go before it
  starts (a run that stopped while a job wrote may have dropped the job's
  incomplete markers too, so the recovery of a killed run would not find them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import traceback
from pathlib import Path

from agentcompass import aio, jsonio, report
from agentcompass.jsonio import read_json
from agentcompass.logs import LOG
from agentcompass.paths import task_segment
from agentcompass.runtime.models import RunRequest
from agentcompass.secrets import Scrubber

from . import engine, forkserver, lifecycle, provenance, shards, stages
from .engine import WorkflowError
from .events import Emitter
from .files import ShardRecord, write_file
from .invocation import Invocation
from .resources import Resources
from .targets import Targets


class Jobs:
    def __init__(self, inv: Invocation, targets: Targets, shard_rule: shards.Shards, resources: Resources,
                 events: Emitter) -> None:
        self.inv = inv
        self.targets = targets
        self.shards = shard_rule
        self.resources = resources
        self.events = events

    @contextlib.contextmanager
    def _job(self, rule: str, w, input, output, params, log):
        reason = aio.stopping()
        if reason is not None:
            raise aio.Stopped(reason)
        for leftover in jsonio.interrupted_writes(*output):
            leftover.unlink(missing_ok=True)
        req = self.inv.request(w)
        debug = LOG.isEnabledFor(logging.DEBUG)  # runtime.log_level: debug
        if debug:
            where = " ".join(f"{k}={v}" for k, v in dict(w.items()).items())
            LOG.debug(f"{rule} {where}: started")
            started = time.monotonic()
        with stage_log(log, rule, w, req), jsonio.publishing(self._recorder(rule, input, output, params, log)):
            yield req
        if debug:
            LOG.debug(f"{rule} {where}: done in {time.monotonic() - started:.3f} s")

    def _recorder(self, rule: str, input, output, params, log):
        workflow = self.inv.snakemake
        records = engine.Records.of(workflow)
        if records is None:
            return lambda path: None
        outputs = {os.path.normpath(str(o)): str(o) for o in output}
        inputs = [str(i) for i in input]
        logs = [str(item) for item in log]
        values = list(params)

        def record(path) -> None:
            named = outputs.get(os.path.normpath(str(path)))
            if named is not None:
                records.write_finished(workflow, rule, named, inputs, logs, values)

        return record

    def _bulk_paths(self, req: RunRequest) -> tuple[str, str]:
        # A job runs after its request's tasks.json and plans.json are written (the DAG
        # orders it so), and reads its own slice of them.
        base = self.inv.run_path(req)
        return str(base / "tasks.json"), str(base / "plans.json")

    # -- per request ------------------------------------------------------------------------

    def write_request(self, w, output, params, log) -> None:
        with self._job("request", w, (), output, params, log) as req:
            stages.write_request(req, output[0])

    def write_tasks(self, w, output, params, log) -> None:
        with self._job("tasks", w, (), output, params, log) as req:
            tasks = stages.write_tasks(req, output[0])
            workflow = self.inv.snakemake
            if (workflow is not None and engine.is_main_process(workflow) and not engine.on_cluster(workflow)
                    and self.targets.shards_for(len(tasks) * req.execution.attempts)):
                forkserver.start()  # the shards' inner runs fork from it: it imports while the plans are made

    def write_plans(self, w, input, output, params, log) -> None:
        """plans.json and, from it, run_info.json: one job, so run_info.json never lags its plans."""
        with self._job("plans", w, input, output, params, log) as req:
            stages.write_plans(req, input.tasks, output.plans)
            stages.run_info(req, output.plans, output.run_info)
            # every attempt's folder: a shard's generation compares their times with its record
            for task in stages.read_tasks(input.tasks):
                for attempt in range(1, req.execution.attempts + 1):
                    os.makedirs(self.targets.attempt_dir(req, task_segment(task.task_id), attempt), exist_ok=True)

    def metrics(self, w, input, output, params, log) -> None:
        with self._job("metrics", w, input, output, params, log) as req:
            stages.metrics(req, self.targets.results_of(req), output[0])

    def report(self, w, input, output, params, log) -> None:
        with self._job("report", w, input, output, params, log) as req:
            report.build(self.inv.run_path(req))

    # -- per attempt ------------------------------------------------------------------------

    def prepare(self, w, input, output, params, log) -> None:
        with self._job("prepare", w, input, output, params, log) as req:
            tasks, plans = self._bulk_paths(req)
            self.events.attempt_job(req, "prepare", w, plans)
            stages.prepare(req, tasks, plans, w.task, int(w.attempt), output[0])

    def run(self, w, input, output, params, log) -> None:
        with self._job("run", w, input, output, params, log) as req:
            tasks, plans = self._bulk_paths(req)
            self.events.attempt_job(req, "run", w, plans, reused=input.prepared)
            stages.run(req, tasks, plans, input.prepared, w.task, int(w.attempt), output[0])

    def evaluate(self, w, input, output, params, log) -> None:
        with self._job("evaluate", w, input, output, params, log) as req:
            tasks, plans = self._bulk_paths(req)
            self.events.attempt_job(req, "evaluate", w, plans, reused=input.output)
            result = stages.evaluate(req, tasks, plans, input.prepared, input.output,
                                     w.task, int(w.attempt), output.result, output.plan)
            self.events.attempt_finished(req, result, input.prepared, input.output)

    # -- per shard ------------------------------------------------------------------------------

    def shard(self, w, input, threads: int, resources, params, output, log) -> None:
        """Build one slice with an inner Snakemake; record what it left in shard.json."""
        with self._job("shard", w, input, output, params, log) as req:
            self.events.announce(req)  # how many attempts its shards build, before the first one starts
            index = int(w.shard)
            started = time.monotonic()
            attempts = self.targets.shard_slice(req, index)
            workflow = self.inv.snakemake
            threads = self.shards.job_threads(threads)
            argv = shards.inner_argv(workflow, threads, self.resources.claims(resources),
                                     shards.forced_rules(workflow), self.targets.attempt_files(req, attempts))
            # on a cluster this job is one SLURM job: its inner run records that job in every output.json
            where = provenance.here()
            # the outer run's invocation, also when this job is a cluster job of its own
            env = shards.inner_env(req.namespace, req.run_id, index, self.events.invocation)
            env[lifecycle.PARENT_ENV] = str(os.getpid())
            if where["slurm_job_id"]:
                env[provenance.JOB_ID_ENV] = where["slurm_job_id"]
            code = shards.run_inner(argv, env, Path(log[0]), fork=engine.is_main_process(workflow))
            if code != 0:
                reason = aio.stopping()
                if reason is not None:
                    raise aio.Stopped(reason)
                raise WorkflowError(
                    f"shard {index} of request {req.metadata.request_name!r}: its inner Snakemake exited with "
                    f"{code}; the jobs that failed are named in {log[0]}. Finished attempts are kept: "
                    f"run again to retry the rest."
                )
            self.events.shard_built(req, index, attempts)
            counts: dict[str, int] = {}
            for segment, attempt in attempts:
                result = read_json(f"{self.targets.attempt_dir(req, segment, attempt)}/result.json")
                counts[result["status"]] = counts.get(result["status"], 0) + 1
            first, last = attempts[0], attempts[-1]
            # the generation first: shard.json appearing means the shard is current
            shards.hold(self.shards.generation_file(req, index), int(params.generation))
            write_file("shard", output[0], ShardRecord(
                request_name=req.metadata.request_name, shard=index, attempts=len(attempts),
                first=f"{first[0]}/{first[1]}", last=f"{last[0]}/{last[1]}", counts=counts,
                host=where["host"], seconds=round(time.monotonic() - started, 3),
                slurm_job_id=where["slurm_job_id"],
            ))


@contextlib.contextmanager
def stage_log(log, stage: str, w, req: RunRequest):
    """Write a failing stage's traceback, scrubbed of the key, to its rule's log file.

    A stage that succeeds writes no log: its timings are in the files it writes,
    and Snakemake removes the log of an earlier failure before it reruns the job.
    """
    try:
        yield
    except BaseException as exc:
        # the request's references and every one this job resolved (the plan's: a task folder's env)
        scrubber = Scrubber([req.to_dict()])
        _scrub_exception(exc, scrubber)  # Snakemake logs the exception it is handed too
        path = Path(log[0])
        path.parent.mkdir(parents=True, exist_ok=True)
        where = " ".join(f"{k}={v}" for k, v in dict(w.items()).items())
        # appended: a shard's log holds its inner run's output, which says what stopped or failed in it
        with open(path, "a") as f:
            if isinstance(exc, aio.Stopped):
                f.write(f"{stage} {where}: stopped before it finished: {exc}\n")
            else:
                f.write(f"{stage} {where}: failed\n" + scrubber.text(traceback.format_exc()))
        raise


def _scrub_exception(exc: BaseException | None, scrubber: Scrubber) -> None:
    """Scrub the text arguments of ``exc`` and of the exceptions it was raised from, in place."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen and scrubber:
        seen.add(id(exc))
        try:
            exc.args = tuple(scrubber.text(a) if isinstance(a, str) else a for a in exc.args)
        except (AttributeError, TypeError):
            pass
        exc = exc.__cause__ or exc.__context__
