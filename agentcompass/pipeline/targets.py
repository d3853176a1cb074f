"""Which files an invocation builds: every request's files, attempt by attempt or shard by shard."""

from __future__ import annotations

import os
from pathlib import Path

from agentcompass import layout
from agentcompass.runtime.models import RunRequest
from agentcompass.stages import ATTEMPT, LAST_ATTEMPT_STAGE, REQUEST, SUMMARY, TASK, of_scope, stage

from . import engine, reading
from .engine import WorkflowError
from .fingerprints import CHECKPOINTS, SHARD_STAGE, Fingerprints
from .invocation import Invocation

ATTEMPT_STAGES = of_scope(ATTEMPT)
TASK_STAGES = of_scope(TASK)
# set to "preflight" (by ``agentcompass check``): an invocation builds the request stages and each
# task's preflight, and no attempt
ONLY_ENV = "AGENTCOMPASS_ONLY_PREFLIGHT"


class Targets:
    def __init__(self, inv: Invocation, fingerprints: Fingerprints) -> None:
        self.inv = inv
        self.fingerprints = fingerprints
        self._bulk_files: dict[tuple[str, str], tuple[str, ...]] = {}
        self._attempts: dict[tuple[str, str], list[tuple[str, int]]] = {}
        self._roots: dict[tuple[str, str], str] = {}

    # -- the bulk files and the attempts they list ------------------------------------------

    def bulk_files(self, req: RunRequest) -> tuple[str, ...]:
        """Paths of tasks.json and plans.json once they are current.

        Until then they come from the checkpoints, which raise (and so make
        Snakemake wait for them) while they still have to be written. Once
        known, they stay so for the invocation: a checkpoint that completed
        does not run again in it. Every attempt job asks, so this is on the hot path.
        """
        key = (req.namespace, req.run_id)
        files = self._bulk_files.get(key)
        if files is None:
            if self.fingerprints.settled(req):
                run = self.inv.run_path(req)
                files = tuple(layout.file_in(run, s) for s in CHECKPOINTS)
            else:
                checkpoints = self.inv.checkpoints
                assert checkpoints is not None  # bound before any job's input is asked for
                files = tuple(getattr(checkpoints, s.name).get(ns=req.namespace, run_id=req.run_id).output[0]
                              for s in CHECKPOINTS)
            self._bulk_files[key] = files
        return files

    def attempt_paths(self, req: RunRequest) -> list[tuple[str, int]]:
        """(task segment, attempt) of every attempt, once tasks.json and plans.json are settled."""
        key = (req.namespace, req.run_id)
        paths = self._attempts.get(key)
        if paths is None:
            tasks_file, _ = self.bulk_files(req)  # raises until the checkpoints are done
            paths = self._attempts[key] = [
                (segment, attempt)
                for segment in reading.task_segments(tasks_file)
                for attempt in range(1, req.execution.attempts + 1)
            ]
        return paths

    def attempt_dir(self, req: RunRequest, segment: str, attempt: int) -> str:
        # plain strings: tens of thousands of paths per parse, and pathlib costs 10x more
        return layout.attempt_folder(self._run(req), segment, attempt)

    def _run(self, req: RunRequest) -> str:
        key = (req.namespace, req.run_id)
        run = self._roots.get(key)
        if run is None:
            run = self._roots[key] = str(self.inv.run_path(req))
        return run

    def attempt_files(self, req: RunRequest, attempts) -> list[str]:
        """Every file of the attempt stages of each of ``attempts``."""
        return layout.attempt_files(self._run(req), attempts, ATTEMPT_STAGES)

    def results_of(self, req: RunRequest) -> list[str]:
        """The file of every attempt that holds its result (the last attempt stage's first)."""
        last = stage(LAST_ATTEMPT_STAGE)
        return [layout.file_in(self.attempt_dir(req, s, a), last) for s, a in self.attempt_paths(req)]

    # -- the task stages (preflight): only with execution.preflight on ---------------------------

    def task_files(self, req: RunRequest, segments) -> list[str]:
        """The task stages' file of each task of ``segments``; none when preflight is off."""
        if req.execution.preflight is None:
            return []
        run = self._run(req)
        return [layout.task_file(run, segment, s) for s in TASK_STAGES for segment in segments]

    def preflight_input(self, w) -> dict[str, str]:
        """The prepare rule's input: its task's preflight file, with preflight on (``{}`` otherwise)."""
        self.inv.begin()
        req = self.inv.request(w)
        files = self.task_files(req, [w.task])
        return {s.name: f for s, f in zip(TASK_STAGES, files)}

    def slice_task_files(self, req: RunRequest, attempts) -> list[str]:
        """The task stages' files of the tasks of a slice of attempts, each once."""
        return self.task_files(req, list(dict.fromkeys(segment for segment, _ in attempts)))

    # -- shards: a large request built in slices (agentcompass.pipeline.shards) ------------------

    def shard_count(self, req: RunRequest) -> int:
        """How many shard jobs build this request: 0 when it is built attempt by attempt.

        Locally a request of at most ``shard_size`` attempts is built attempt by
        attempt. On a cluster (an executor that submits jobs) a job costs seconds
        to start, so every request is built in shards: one cluster job per
        ``shard_size`` attempts, or fewer.
        """
        if self.inv.inner is not None or not self.inv.runtime.shard_size:
            return 0
        return self.shards_for(len(self.attempt_paths(req)))

    def shards_for(self, total: int) -> int:
        """How many shard jobs build a request of ``total`` attempts (``shard_count``)."""
        size = self.inv.runtime.shard_size
        if self.inv.inner is not None or not size:
            return 0
        if total <= size and not engine.on_cluster(self.inv.snakemake):
            return 0
        return -(-total // size)

    def shard_slice(self, req: RunRequest, index: int) -> list[tuple[str, int]]:
        size = self.inv.runtime.shard_size
        return self.attempt_paths(req)[index * size:(index + 1) * size]

    def shard_file(self, req: RunRequest, index: int) -> Path:
        return Path(layout.file_in(layout.shard_folder(self.inv.run_path(req), index), SHARD_STAGE))

    # -- target lists ------------------------------------------------------------------------

    def of_request(self, req: RunRequest) -> list[str]:
        if self.inv.inner is not None:  # a shard's inner run: its slice's attempt files, nothing else
            ns, run_id, index = self.inv.inner
            if (req.namespace, req.run_id) != (ns, run_id):
                return []
            if not self.fingerprints.settled(req):
                raise WorkflowError(
                    f"shard {index} of request {req.metadata.request_name!r} started while its tasks.json "
                    f"or plans.json still had to be rebuilt. Fix: run the whole request, not the shard alone."
                )
            return self.attempt_files(req, self.shard_slice(req, index))
        run = self.inv.run_path(req)
        # Settled bulk files are left out: naming a checkpoint's output would make
        # Snakemake re-evaluate everything depending on it, for files it will not rebuild.
        settled = self.fingerprints.settled(req)
        targets = [f for s in of_scope(REQUEST, SUMMARY) if not (settled and s.checkpoint)
                   for f in layout.files_in(run, s)]
        if os.environ.get(ONLY_ENV):
            return [f for s in of_scope(REQUEST) if not (settled and s.checkpoint) for f in layout.files_in(run, s)] \
                + self.slice_task_files(req, self.attempt_paths(req))
        count = self.shard_count(req)
        # each task's preflight is built by this run, never by a shard's inner one
        targets += self.slice_task_files(req, self.attempt_paths(req))
        if count:
            return targets + [str(self.shard_file(req, k)) for k in range(count)]
        return targets + self.attempt_files(req, self.attempt_paths(req))

    @engine.signature_once
    def all(self, wildcards=None) -> list[str]:
        self.inv.begin()
        return [t for req in self.inv.requests for t in self.of_request(req)]

    @engine.signature_once
    def metrics_inputs(self, w) -> list[str]:
        """Every result.json of the request, or, for a sharded one, the shard records standing for them."""
        self.inv.begin()
        req = self.inv.request(w)
        count = self.shard_count(req)
        if count:
            return [str(self.shard_file(req, k)) for k in range(count)]
        return self.results_of(req)
