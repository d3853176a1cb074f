"""The bodies of the summary stages (scope ``summary``, built from every attempt's files): metrics.json
and the request's report."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from agentcompass import layout
from agentcompass import report as report_pages
from agentcompass import results as results_data
from agentcompass._util.jsonio import read_json
from agentcompass.runtime.models import MetricSummary, RunResult, ScoredOn
from agentcompass.runtime.models.result import FlagFigures
from agentcompass.runtime.models.codec import from_dict
from agentcompass.runtime.registry import ANALYZERS

from ..jobs import RequestJob
from ..reading import benchmark_for


def metrics(job: RequestJob) -> None:
    """metrics.json: the Benchmark's own metrics, and the summary every Benchmark gets (results.summary)."""
    assert job.services is not None  # the request's results are the invocation's targets
    write_metrics(job, job.services.targets.results_of(job.request))


def write_metrics(job: RequestJob, result_paths: list) -> None:
    """Write the job's metrics.json, the metrics of the results at ``result_paths``, and the analyzers'
    reports beside it.

    Every figure is over the attempts ``results.left_out`` leaves in (no infrastructure failure, no
    quarantined task): the Benchmark's metrics get only those, the summary counts only those in its
    accuracy and pass@k, and ``scored_on`` says what that is (docs/reports.md).
    """
    req, out = job.request, job.output("metrics")
    every = [read_json(p) for p in result_paths]
    results = [from_dict(RunResult, data, str(p)) for data, p in zip(every, result_paths)
               if results_data.left_out(data) is None]
    results.sort(key=lambda r: (r.task_id, r.attempt))
    benchmark = benchmark_for(req)
    metric = benchmark.aggregate_metrics(results, req)
    # counts by status are of every attempt but the quarantined (which ran nothing): an infrastructure failure
    # is a failed attempt of the run (retry --only infrastructure), though no figure counts it
    shown = [data for data in every if results_data.left_out(data) != results_data.QUARANTINED]
    metric.counts = dict(sorted(Counter(data["status"] for data in shown).items()))
    metric.num_attempts, metric.num_tasks = len(shown), len({data["task_id"] for data in shown})
    scored = results_data.scored_on(every)
    metric.scored_on = from_dict(ScoredOn, scored, "metrics scored_on")
    # request.json is not this rule's input, so the run is described by the request in hand
    run = results_data.Run(Path(out).parent, req.to_dict())
    quarantined = {q["task_id"] for q in scored["quarantined"]}
    # each attempt's scan.json, read once, when the request names scanners; none else (a scan.json left from
    # scanners since removed is not this request's)
    scans = {(data["task_id"], data["attempt"]): results_data.read_scan(Path(p).parent)
             for data, p in zip(every, result_paths)} if req.scanners else {}
    table = [row for row in results_data.rows(run, {(data["task_id"], data["attempt"]): data for data in every}, scans)
             if row["task_id"] not in quarantined]
    pricing = req.model.pricing.to_dict() if req.model.pricing else None
    metric.summary = from_dict(MetricSummary, results_data.summary(table, pricing), "metrics summary")
    if req.scanners:  # flags stand beside the figures above, which stay those of every attempt

        def unflagged_metrics(unflagged: list) -> dict:
            """The Benchmark's own metrics over the results of these rows (those no scanner flagged)."""
            keep = {(row["task_id"], row["attempt"]) for row in unflagged}
            return benchmark.aggregate_metrics([r for r in results if (r.task_id, r.attempt) in keep], req).metrics

        metric.flags = from_dict(FlagFigures, results_data.flag_figures(table, scans, pricing, unflagged_metrics),
                                 "metrics flags")
    job.write("metrics", metric)
    if req.execution.analyzers:
        frame = results_data.to_frame(table)
        for analyzer_id in req.execution.analyzers:
            ANALYZERS.get(analyzer_id)().analyze(req, frame, Path(out).parent / layout.ANALYZER_REPORTS / analyzer_id)


def report(job: RequestJob) -> None:
    """report/index.html and the charts beside it (``agentcompass.report``: HTML and SVG, not JSON)."""
    report_pages.build(job.run)
