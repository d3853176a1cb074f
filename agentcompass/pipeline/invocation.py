"""One Snakemake invocation of the workflow: the requests it builds, and what its parts share."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from agentcompass.layout import run_dir
from agentcompass.runtime.models import Orchestration, RunRequest

from . import shards


class Invocation:
    """The resolved orchestration, Snakemake's handles, and this invocation's identity.

    ``begin`` runs once, at the first call Snakemake makes into the workflow
    while it builds its DAG (after the Snakefile is parsed, before any job):
    by then it is known whether this invocation builds files or only looks.
    """

    def __init__(self, orchestration: Orchestration) -> None:
        self.orchestration = orchestration
        self.runtime = orchestration.runtime
        self.results_dir = orchestration.runtime.results_dir
        self.by_key: dict[tuple[str, str], RunRequest] = {
            (run.request.namespace, run.request.run_id): run.request for run in orchestration.runs
        }
        self.started = time.time()
        # with reuse off, params change once per invocation; an inner run shares its outer run's
        self.nonce = shards.invocation(f"{time.time_ns()}")
        # set when this Snakemake is a shard's inner run: it builds that slice only
        self.inner = shards.inner_shard()
        self.checkpoints = None
        self.snakemake = None
        self._begin: Callable[[], None] | None = None
        self.begun = False

    def bind(self, checkpoints, workflow, begin: Callable[[], None] | None = None) -> None:
        self.checkpoints = checkpoints
        self.snakemake = workflow
        self._begin = begin

    def begin(self) -> None:
        if not self.begun:
            self.begun = True
            if self._begin is not None and self.snakemake is not None:
                self._begin()

    @property
    def requests(self) -> list[RunRequest]:
        return [run.request for run in self.orchestration.runs]

    def request(self, w) -> RunRequest:
        return self.by_key[(w.ns, w.run_id)]

    def run_path(self, req: RunRequest) -> Path:
        return run_dir(self.results_dir, req.namespace, req.run_id)

    @staticmethod
    def wildcards(req: RunRequest) -> SimpleNamespace:
        return SimpleNamespace(ns=req.namespace, run_id=req.run_id)

    def is_inner_of(self, req: RunRequest) -> bool:
        return self.inner is not None and self.inner[:2] == (req.namespace, req.run_id)
