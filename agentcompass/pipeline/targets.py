"""Which files an invocation builds: every request's files, attempt by attempt or shard by shard.

Each scope's row (``agentcompass.stages.SCOPE_ROWS``) names the method here
that lists a request's instances of it (``Scope.instances``: their wildcards'
values); the targets are the files of every stage built for the request, in
each instance of its scope.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentcompass import layout
from agentcompass.runtime.models import RunRequest
from agentcompass.stages import BY_NAME, LAST_ATTEMPT_STAGE, ONLY_ENV, SCOPE_ROWS, STAGES_OF, Scope, stage, where

from . import engine, reading
from .engine import WorkflowError
from .fingerprints import CHECKPOINTS, SHARD_STAGE, Fingerprints
from .invocation import Invocation

# the stages a shard's inner run builds: an attempt's
ATTEMPT_STAGES = where(in_shards=True)
# the attempt stage whose files metrics.json counts the flags of (scan: scan.json, kind ``scan``), as
# ``results.SCAN_FILE`` names it; no other stage after the result (one of a user's that metrics.json does not
# read never rebuilds it)
AFTER_RESULT = tuple(s for s in ATTEMPT_STAGES if any(o.kind == "scan" for o in s.outputs))
# the scopes in the order their files are targets: the run folder's first, then the tasks', the attempts'
# or the shards'
TARGET_ROWS: tuple[Scope, ...] = tuple(sorted(SCOPE_ROWS, key=lambda row: not row.per_request))
# with ONLY_ENV set (``agentcompass check``), the targets are the stages before the attempts'
# (``Scope.before_attempts``: the request stages and each task's preflight)


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
        """Every file of the attempt stages built for ``req`` of each of ``attempts``."""
        return layout.files_of(self._run(req), [s for s in ATTEMPT_STAGES if s.built_for(req)], attempts)

    def results_of(self, req: RunRequest) -> list[str]:
        """The file of every attempt that holds its result (the last attempt stage's first)."""
        last = stage(LAST_ATTEMPT_STAGE)
        return [layout.file_in(self.attempt_dir(req, s, a), last) for s, a in self.attempt_paths(req)]

    # -- each scope's instances: the wildcards' values of its stages' jobs ----------------------

    def instances(self, req: RunRequest, row: Scope, attempts: list[tuple[str, int]]) -> list[tuple]:
        """The instances of ``row``'s scope this process builds for ``req``, given its attempts
        ((segment, n) each): each its wildcards' values, in the scope's order."""
        return getattr(self, row.instances)(req, attempts)

    def run_instance(self, req: RunRequest, attempts) -> list[tuple]:
        """The run folder, once (the outer run's; a shard's inner run builds its slice alone)."""
        return [] if self.inv.inner is not None else [()]

    def task_instances(self, req: RunRequest, attempts) -> list[tuple]:
        """Each task of ``attempts``, once (the outer run's, never a shard's inner one)."""
        if self.inv.inner is not None:
            return []
        return [(segment,) for segment in dict.fromkeys(segment for segment, _ in attempts)]

    def attempt_instances(self, req: RunRequest, attempts) -> list[tuple]:
        """Every attempt, when the request is built attempt by attempt; a shard's inner run: its slice's."""
        if self.inv.inner is not None:
            size, index = self.inv.runtime.shard_size, self.inv.inner[2]
            return attempts[index * size:(index + 1) * size]
        return [] if self.shards_for(len(attempts)) else attempts

    def shard_instances(self, req: RunRequest, attempts) -> list[tuple]:
        """Each shard, when the request is built in shards."""
        return [(str(k),) for k in range(self.shards_for(len(attempts)))]

    def task_files(self, req: RunRequest, attempts) -> list[str]:
        """The files of every per-task stage built for ``req``, of each task of ``attempts`` once (a
        shard's input: this run builds them first, so no two shards build one)."""
        tasks = [(segment,) for segment in dict.fromkeys(segment for segment, _ in attempts)]
        return [f for row in SCOPE_ROWS if row.per_task for f in self.files_of(req, STAGES_OF[row.name], tasks)]

    def files_of(self, req: RunRequest, stages, instances) -> list[str]:
        """Every file of ``stages`` (of one scope, those built for ``req``) in each of ``instances``."""
        return layout.files_of(self._run(req), [s for s in stages if s.built_for(req)], instances)

    def inputs_of(self, name: str):
        """The input function of stage ``name``'s rule for its inputs built only with a setting on (their
        stage's ``when``): ``unpack(EVAL.targets.inputs_of("prepare"))``; each in the job's own instance
        (the preflight file of an attempt's task)."""
        # each input: its name, its stage, and which of the stage's files it is
        conditional = [(key, BY_NAME[source], BY_NAME[source].files.index(BY_NAME[source].output(output).file))
                       for key, source, output in BY_NAME[name].conditional_inputs()]

        def inputs(w) -> dict[str, str]:
            self.inv.begin()
            req = self.inv.request(w)
            found = {}
            for key, s, index in conditional:
                if s.built_for(req):
                    values = tuple(getattr(w, wildcard) for wildcard in s.scope_row.wildcards)
                    found[key] = layout.files_of(self._run(req), [s], [values])[index]
            return found

        return inputs

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
        # Settled bulk files are left out: naming a checkpoint's output would make
        # Snakemake re-evaluate everything depending on it, for files it will not rebuild.
        settled = self.fingerprints.settled(req)
        only_before = bool(os.environ.get(ONLY_ENV))
        attempts = self.attempt_paths(req)  # raises until the checkpoints are done
        return [f for row in TARGET_ROWS if row.before_attempts or not only_before
                for f in self.files_of(req, [s for s in STAGES_OF[row.name] if not (settled and s.checkpoint)],
                                       self.instances(req, row, attempts))]

    @engine.signature_once
    def all(self, wildcards=None) -> list[str]:
        self.inv.begin()
        return [t for req in self.inv.requests for t in self.of_request(req)]

    @engine.signature_once
    def metrics_inputs(self, w) -> list[str]:
        """Every result.json of the request, and each attempt's file of a stage after it built for the request
        (scan.json, with scanners: metrics.json counts its flags, and is rebuilt when it is); for a sharded
        request, the shard records standing for them (a shard's record is rewritten whenever its inner run
        rebuilds one of its attempts' files)."""
        self.inv.begin()
        req = self.inv.request(w)
        count = self.shard_count(req)
        if count:
            return [str(self.shard_file(req, k)) for k in range(count)]
        later = [s for s in AFTER_RESULT if s.built_for(req)]
        if not later:  # a request without scanners: its inputs are what they were
            return self.results_of(req)
        return self.results_of(req) + layout.files_of(self._run(req), later, self.attempt_paths(req))
