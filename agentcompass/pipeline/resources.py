"""What a job holds while it runs: Snakemake resources that cap work in flight.

- ``model_endpoint_<slug>``: one per model endpoint; a prepare and a run job
  take 1 of their own endpoint's and 0 of the others, so a profile's
  ``resources:`` caps the model calls in flight at that endpoint (docs/models.md,
  Concurrency per endpoint), and attempts are prepared only as fast as it takes them.
  An evaluate job takes 1 of the endpoint of each Model its Benchmark calls
  while scoring (``evaluation_models``: a judge).
- ``task_concurrency``: every prepare, run and evaluate job takes 1, so at most
  ``task_concurrency`` attempt jobs run at once, whatever ``--cores`` says.
- ``environment_<id>``: every attempt job of a request whose Environment is
  ``<id>`` takes 1, so at most ``runtime.provider_limits[<id>]`` of its
  sessions are open at once (a stage opens at most one session at a time).

The last two are set from the run config; a cap given on the command line or
in a profile (``--resources task_concurrency=8``) wins. A shard job claims of
each what its inner run may use at once (its threads, or the whole cap when
that is smaller) and hands its claim to the inner run as that run's caps, so
the shards running at once never exceed a cap together, locally or on a cluster.
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any

from agentcompass.runtime import BENCHMARKS
from agentcompass.runtime.model_client import endpoint_resource
from agentcompass.runtime.models import ModelSpec, RunRequest

from agentcompass.stages import JUDGE, MODEL, sole, stage

from . import engine
from .invocation import Invocation

SHARD_RULE = sole(slices_attempts=True).name

TASK_CONCURRENCY = "task_concurrency"
# the driver's caps, for its cluster jobs: a job's Snakemake computes a shard's claims again
CAPS_ENV = "AGENTCOMPASS_RESOURCE_CAPS"


def environment_resource(environment_id: str) -> str:
    """The resource that counts a provider's open sessions: ``environment_docker``."""
    return "environment_" + re.sub(r"[^A-Za-z0-9]+", "_", environment_id).strip("_").lower()


def model_endpoint(req: RunRequest) -> str | None:
    """The endpoint resource of the Model the request's harness calls, or None when it calls none."""
    return endpoint_resource(req.model.base_url) if req.model.base_url and not req.model.is_none else None


def evaluation_endpoints(req: RunRequest) -> list[str]:
    """The endpoint resources of the Models the request's Benchmark calls in its evaluate stage."""
    return [endpoint_resource(m.base_url) for m in _evaluation_models(req) if m.base_url]


def _evaluation_models(req: RunRequest) -> list[ModelSpec]:
    return BENCHMARKS.get(req.benchmark.id)().evaluation_models(req)


class Resources:
    def __init__(self, inv: Invocation) -> None:
        self.inv = inv
        self._claims_of: dict[tuple[str, str, str], dict[str, int]] = {}

    def apply_caps(self) -> None:
        """Hand the run config's caps (task_concurrency, provider_limits) to Snakemake as global resources."""
        workflow = self.inv.snakemake
        if workflow is None or self.inv.inner is not None:  # an inner run gets its shard's claim instead
            return
        caps = self.config_caps()
        for name, value in caps.items():
            if engine.global_resource(workflow, name) is None:
                engine.set_global_resource(workflow, name, value)

    def config_caps(self) -> dict[str, int]:
        caps: dict[str, int] = {}
        concurrency = {c for c in (req.execution.task_concurrency for req in self.inv.requests) if c is not None}
        if concurrency:
            caps[TASK_CONCURRENCY] = min(concurrency)
        for environment_id, limit in self.inv.runtime.provider_limits.items():
            caps[environment_resource(environment_id)] = int(limit)
        return caps

    def names(self) -> list[str]:
        """Every resource a job of this invocation may claim."""
        endpoints = {name for name in map(model_endpoint, self.inv.requests) if name is not None}
        endpoints |= {name for r in self.inv.requests for name in evaluation_endpoints(r)}
        environments = {environment_resource(r.environment.id) for r in self.inv.requests}
        return sorted(endpoints | environments | {TASK_CONCURRENCY})

    def _claims(self, req: RunRequest, rule: str) -> dict[str, int]:
        """What one job of ``rule`` holds; the same for every job of a request, so computed once
        (Snakemake asks for each resource of each job, and each answer parses the endpoint
        URLs and builds the Benchmark)."""
        key = (req.namespace, req.run_id, rule)
        claims = self._claims_of.get(key)
        if claims is None:
            claims = self._claims_of[key] = self._compute_claims(req, rule)
        return claims

    def _compute_claims(self, req: RunRequest, rule: str) -> dict[str, int]:
        claims = {TASK_CONCURRENCY: 1, environment_resource(req.environment.id): 1}
        # prepare too: under a cap, attempts are prepared as the endpoint takes them, not all at
        # once ahead of it (every prepared attempt waiting for a unit is a job Snakemake weighs,
        # and measures the input of, at every job selection)
        wanted = stage(rule).claims
        endpoint = model_endpoint(req)
        if MODEL in wanted and endpoint is not None:
            claims[endpoint] = 1
        if JUDGE in wanted:  # a judge the Benchmark calls while it scores
            claims.update({name: 1 for name in evaluation_endpoints(req)})
        return claims

    def _attempt_job(self, name: str, rule: str, wildcards) -> int:
        return self._claims(self.inv.request(wildcards), rule).get(name, 0)

    def attempt_job(self, rule: str) -> dict[str, Any]:
        """The resources of one job of an attempt stage (for ``resources: **...``)."""
        return {
            name: engine.signature_once(functools.partial(self._attempt_job, name, rule))
            for name in self.names()
        }

    def shard_job(self) -> dict[str, Any]:
        """A shard claims of each resource its attempts use what its inner run may use at once:
        its threads, or the whole cap when that is smaller. The threads are the job's own,
        after a profile's ``set-threads`` (a cluster profile's usual way to size a shard)."""
        return {name: engine.signature_once(functools.partial(self._shard_share, name)) for name in self.names()}

    def _shard_share(self, name: str, wildcards, threads) -> int:
        if not self._attempt_job(name, SHARD_RULE, wildcards):
            return 0
        workflow = self.inv.snakemake
        if workflow is not None and not engine.is_main_process(workflow):
            # a cluster job: the shard's threads as the driver counted them (shards.Shards.job_threads)
            threads = max(threads, engine.requested_threads(workflow, SHARD_RULE) or 0)
        cap = self.cap(name)
        return min(threads, int(cap)) if cap else threads

    def cap(self, name: str) -> int | None:
        """A resource's cap: this run's, or, in a cluster job, the one the driver handed down."""
        workflow = self.inv.snakemake
        if workflow is not None and not engine.is_main_process(workflow):
            return json.loads(os.environ.get(CAPS_ENV) or "{}").get(name)
        return engine.global_resource(workflow, name) if workflow is not None else None

    def hand_down(self) -> None:
        """Put this run's caps where its cluster jobs find them (their environment)."""
        caps = {name: self.cap(name) for name in self.names()}
        os.environ[CAPS_ENV] = json.dumps({k: v for k, v in caps.items() if v is not None})

    def claims(self, resources) -> dict[str, int]:
        """A shard job's claims (the inner run's caps). Every claim is handed on, capped or not:
        a cluster job's Snakemake does not know the driver's caps, and an uncapped claim is the
        shard's threads, which the inner run never exceeds anyway."""
        return {name: int(getattr(resources, name)) for name in self.names()
                if int(getattr(resources, name, 0) or 0) > 0}
