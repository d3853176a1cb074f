"""The bodies of an attempt's stages (scope ``attempt``): prepare (prepared.json), run (output.json) and
evaluate (result.json and plan.json), each in its own sessions (``pipeline.sessions``); and what they share:
the attempt's call cache and limits, and the files it left scrubbed of secrets. And scan (scan.json, only
with scanners): the selected transcript scanners over the attempt's trajectory and result, in this process,
opening no session; only a scanner that asks a judge Model (``judge``) calls one, through the same cache and
limits."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import os
import time
from pathlib import Path

from agentcompass import callcache, layout, spend
from agentcompass._util.aio import run_coroutine
from agentcompass._util.jsonio import interrupted_writes, read_json, write_bytes_atomic
from agentcompass._util.logs import LOG
from agentcompass._util.trees import remove_tree
from agentcompass.errors import InfrastructureError
from agentcompass.runtime import failures
from agentcompass.runtime.base import EnvironmentSession, HarnessContext, HarnessFreeBenchmark, error_result, retryable
from agentcompass.runtime.registry import SCANNERS
from agentcompass.runtime.transcript import Transcript, read_transcript
from agentcompass.runtime.model_client import ATTEMPT_TRAJECTORY, ATTEMPT_USAGE, Usage, counted
from agentcompass.runtime.models import (
    FailureClass,
    PreparedTask,
    RunResult,
    ScanFinding,
    ScannerSpec,
    ScanRecord,
    TaskInput,
    TaskStatus,
)
from agentcompass.runtime.models.codec import from_dict
from agentcompass.secrets import Scrubber

from .. import preflight, provenance
from ..jobs import AttemptJob
from ..reading import benchmark_for, harness_for, read_result
from ..sessions import evaluate_in, prepare_in, run_in


def scrub_attempt_files(attempt_dir: Path, scrubber: Scrubber) -> None:
    """Rewrite the files a harness or Benchmark left at the top of the attempt folder (its trajectory,
    its logs) with every secret value replaced by its reference: JSON lines as values, other text as text.

    The agent's own files (the workspace folders, ``outputs/``) are not rewritten: they are what is
    evaluated. Links are left alone (never followed), and so are the stage's own JSON files, which
    ``job.write`` scrubs as it writes them.
    """
    if not scrubber:
        return
    try:
        entries = list(os.scandir(attempt_dir))
    except FileNotFoundError:
        return
    for entry in entries:
        if not entry.is_file(follow_symlinks=False) or entry.name.endswith((".json", ".tmp")):
            continue
        path = Path(entry.path)
        data = path.read_bytes()
        text = data.decode("utf-8", errors="surrogateescape")
        scrubbed = scrubber.json_lines(text) if entry.name.endswith(".jsonl") else scrubber.text(text)
        if scrubbed != text:  # bytes that are not UTF-8 come back as they were
            write_bytes_atomic(path, scrubbed.encode("utf-8", errors="surrogateescape"))



# The key of a PreparedTask's metadata that says why the task could not be prepared (its image did not
# build, or is missing): the run stage ends the attempt with it.
PREPARE_FAILED = "prepare_failed"


def prepare_failed_result(task_id: str, attempt: int, why: dict) -> RunResult:
    """The result of an attempt whose task could not be prepared: run_error, class infrastructure,
    ``error_stage`` 'prepare' (``retry`` prepares it again)."""
    return RunResult(task_id=task_id, attempt=attempt, status=TaskStatus.RUN_ERROR, error=str(why.get("error")),
                     error_stage="prepare", failure_class=FailureClass.INFRASTRUCTURE,
                     metadata={"failure": {"class": FailureClass.INFRASTRUCTURE.value}})


def prepare(job: AttemptJob) -> None:
    """Write the attempt's PreparedTask (+ the prepared workspace)."""
    req, plan, task = job.request, job.plan, job.task
    saved = Path(job.folder) / layout.WORKSPACE
    remove_tree(saved, ignore_errors=True)
    why = preflight.quarantine(job.inputs.get("preflight"))
    if why is not None:  # its preflight did not pass: no session; the run stage writes why
        job.write("prepared", PreparedTask(task_id=task.task_id, input=TaskInput(prompt=""),
                                           metadata={preflight.QUARANTINE: why}))
        return
    if task.load_error is not None:  # nothing to prepare: the run stage reports the error
        job.write("prepared", PreparedTask(task_id=task.task_id, input=TaskInput(prompt="")))
        return
    try:
        prepared = run_coroutine(prepare_in(req, plan, task, Path(job.folder)))
    except InfrastructureError as exc:
        if retryable(exc):  # e.g. the engine out of reach: the job fails, the next run prepares again
            raise
        # the same on every try (an image that does not build, or is missing): the attempt's failure, which
        # the run stage writes; the run goes on, and `retry` prepares again
        LOG.warning(f"prepare {task.task_id} (attempt {plan.attempt}): {type(exc).__name__}: {exc}")
        failed = PreparedTask(task_id=task.task_id, input=TaskInput(prompt=""), metadata={
            PREPARE_FAILED: {"error": f"{type(exc).__name__}: {exc}"}})
        job.write("prepared", failed, secrets=job.secrets)  # a build log may echo what the build was given
        return
    job.write("prepared", prepared)


def run(job: AttemptJob) -> None:
    """Run the harness (or harness-free Benchmark) with runtime retries; write output.json."""
    req, plan, task = job.request, job.plan, job.task
    prepared = from_dict(PreparedTask, read_json(job.inputs["prepared"]), job.inputs["prepared"])
    attempt_dir = Path(job.folder)
    trajectory = attempt_dir / layout.TRAJECTORY
    outputs = attempt_dir / layout.OUTPUTS
    final_workspace = attempt_dir / layout.FINAL_WORKSPACE
    benchmark = benchmark_for(req)
    harness = harness_for(req)

    def call(session: EnvironmentSession):
        if harness is None:
            assert isinstance(benchmark, HarnessFreeBenchmark)
            return benchmark.run_task(prepared, session, req, plan)
        reference = benchmark.reference_solution(task, plan.benchmark_plan) if harness.is_oracle else None
        context = HarnessContext(
            attempt=plan.attempt, attempt_dir=attempt_dir, trajectory_path=trajectory,
            reference=reference, timeout=plan.execution.task_timeout,
        )
        return harness.run(prepared, session, req, plan.harness_plan, context)

    # every call of every try (a runtime retry's too), counted as it is made: whatever ends the attempt
    # (an error, its time limit, a harness that raised) its result holds them
    spent = Usage()
    calls = attempt_calls(job, "run")
    limited = attempt_spend(job, "run")

    async def once() -> RunResult:
        ATTEMPT_TRAJECTORY.set(trajectory)  # a ModelClient of this attempt records its calls there
        ATTEMPT_USAGE.set(spent)  # ... and counts them there, as the model gateway does
        callcache.ATTEMPT_CALLS.set(calls)  # ... and both read and keep their replies through it
        spend.ATTEMPT_SPEND.set(limited)  # ... and both keep to its limits and pay into its ledgers
        if calls is not None:
            calls.restart()  # each try of the attempt gets the replies of the first, in order
        return await run_in(req, plan, prepared, attempt_dir, call)

    started = time.monotonic()
    retries = 0
    while True:
        trajectory.unlink(missing_ok=True)  # written by the harness, if it keeps one
        for leftover in interrupted_writes(trajectory):  # of a run of this attempt killed while scrubbing it
            leftover.unlink(missing_ok=True)
        for stale in (outputs, final_workspace):
            remove_tree(stale, ignore_errors=True)  # the agent's tree: any depth, names, modes
        why = preflight.read_prepared_quarantine(prepared)
        if why is not None:  # its preflight did not pass: no sandbox, no model call
            result = preflight.quarantined_result(plan.task_id, plan.attempt, why)
            break
        failed = prepared.metadata.get(PREPARE_FAILED)
        if isinstance(failed, dict):  # its task could not be prepared: no sandbox, no model call
            result = prepare_failed_result(plan.task_id, plan.attempt, failed)
            break
        if task.load_error is not None:  # the task's own error: no sandbox, no model call
            result = RunResult(task_id=task.task_id, status=TaskStatus.RUN_ERROR, error=task.load_error, error_stage="load")
            break
        try:
            result = run_coroutine(once())
            break
        except asyncio.TimeoutError:  # execution.task_timeout: the attempt's time limit
            result = error_result(plan.task_id, plan.attempt, "run", f"timed out after {plan.execution.task_timeout} s")
            result.failure_class = FailureClass.LIMIT
            break
        except Exception as exc:
            if not retryable(exc):
                # the agent's failure is a status
                result = failures.failed(error_result(plan.task_id, plan.attempt, "run", exc), exc, "run")
                break
            if retries < plan.execution.max_retries:
                retries += 1
                continue
            result = failures.failed(error_result(plan.task_id, plan.attempt, "run", exc), exc, "run")
            break
    if calls is not None and calls.misses:  # a replay that met a call it holds no reply for
        result = cache_missed(result, calls.misses[0], "run")
    if limited.reached is not None:  # a call was refused: whatever the harness made of it, the attempt hit a limit
        result = limit_reached(result, limited)
    result = dataclasses.replace(
        failures.classified(result, "run"),
        task_id=plan.task_id,
        attempt=plan.attempt,
        retries_used=retries,
        usage=counted(result.usage, spent),
        timings={**result.timings, "run_seconds": round(time.monotonic() - started, 6)},
        provenance=dict(provenance.here()),
    )
    # before output.json appears: a finished attempt's files are all final
    scrub_attempt_files(attempt_dir, Scrubber(job.secrets))
    job.write("output", result, secrets=job.secrets)


def attempt_calls(job: AttemptJob, stage_name: str) -> callcache.AttemptCalls | None:
    """The call cache as the attempt's ``stage_name`` stage uses it, with the request's mode (None when
    off); its folder is the invocation's (``runtime.cache_dir``, else in the results folder)."""
    mode = callcache.cache_mode(job.request.execution.cache)
    if mode == "off":
        return None
    runtime = job.runtime
    scrubber = Scrubber(job.secrets)
    return callcache.AttemptCalls(callcache.CallStore(callcache.cache_root(runtime.results_dir, runtime.cache_dir)),
                                  mode, job.plan.attempt, stage_name, scrub=scrubber.text if scrubber else None)


def attempt_spend(job: AttemptJob, stage_name: str) -> spend.AttemptSpend:
    """The attempt's ``stage_name`` stage's limits (its plan's ``execution.limits``) and the ledgers it pays
    into, under a budget: its request's, and the invocation's when the run has one (``runtime.budget``)."""
    runtime = job.runtime
    budgeted = job.request.execution.budget is not None or runtime.budget is not None
    ledgers = [spend.request_ledger(job.run)] if budgeted else []
    invocation = spend.invocation_ledger() if runtime.budget is not None else None
    if invocation is not None:
        ledgers.append(invocation)
    pricing = job.request.model.pricing.to_dict() if job.request.model.pricing else None
    return spend.AttemptSpend(job.plan.execution.limits, pricing, ledgers, stage_name)


def limit_reached(result: RunResult, limited: spend.AttemptSpend) -> RunResult:
    """``result`` as an attempt a limit ended (``execution.limits``): an error of the ``limit`` class that keeps
    what the attempt did (its answer, usage, outputs and trajectory); ``metadata.limit`` names the limit."""
    stage_name = limited.stage
    return dataclasses.replace(
        result, status=TaskStatus.RUN_ERROR if stage_name == "run" else TaskStatus.EVAL_ERROR,
        error=limited.reached, error_stage=stage_name, failure_class=FailureClass.LIMIT, correct=None, score=None,
        metadata={**result.metadata, "limit": limited.as_metadata(), "failure": {"class": FailureClass.LIMIT.value}})


def cache_missed(result: RunResult, miss: dict, stage_name: str) -> RunResult:
    """``result`` as the error of a replay that met a call the cache holds no reply for: the miss is the
    attempt's error (its endpoint, the cache, could not answer), named in ``metadata.cache_miss``."""
    return dataclasses.replace(
        result, status=TaskStatus.RUN_ERROR if stage_name == "run" else TaskStatus.EVAL_ERROR,
        error=callcache.miss_message(miss), error_stage=stage_name, failure_class=FailureClass.ENDPOINT,
        metadata={**result.metadata, "cache_miss": miss, "failure": {"class": FailureClass.ENDPOINT.value}})


def evaluate(job: AttemptJob) -> RunResult:
    """Score the attempt in its evaluation environment; write result.json and the plan it used; return the result.

    Every change of an attempt's plan reruns evaluation (it is the last stage),
    so plan.json is written here and always matches the plans file.
    """
    req, plan = job.request, job.plan
    job.write("plan", job.plan_dict)
    task = job.task
    prepared = from_dict(PreparedTask, read_json(job.inputs["prepared"]), job.inputs["prepared"])
    output = read_result(job.inputs["output"])
    attempt_dir = Path(job.folder)

    if output.status.is_error or output.status == TaskStatus.SKIPPED:
        output = failures.classified(output, "run")  # an output.json of an older version names no class
        job.write("result", output)
        return output

    started = time.monotonic()
    judged = Usage()  # a judge's calls, counted as they are made: kept whatever ends the evaluation
    calls = attempt_calls(job, "evaluate")
    limited = attempt_spend(job, "evaluate")
    try:
        result = run_coroutine(evaluate_in(req, plan, task, prepared, output, attempt_dir, judged=judged,
                                           calls=calls, limited=limited))
    except Exception as exc:
        result = failures.failed(dataclasses.replace(
            output, status=TaskStatus.EVAL_ERROR, error=f"{type(exc).__name__}: {exc}", error_stage="evaluate",
            correct=None, score=None,
        ), exc, "evaluate")
    if calls is not None and calls.misses:
        result = cache_missed(dataclasses.replace(output, correct=None, score=None), calls.misses[0], "evaluate")
    if limited.reached is not None:  # a judge's call was refused: the verdict cannot stand
        result = limit_reached(dataclasses.replace(output, correct=None, score=None), limited)
    result = dataclasses.replace(
        failures.classified(result, "evaluate"), usage=counted(result.usage, judged, "judge_"), timings={**result.timings, "evaluate_seconds": round(time.monotonic() - started, 6)},
        provenance=output.provenance,  # where the run stage ran: scoring never moves it
    )
    scrub_attempt_files(attempt_dir, Scrubber(job.secrets))  # a judge's calls in the trajectory
    job.write("result", result, secrets=job.secrets)
    return result


# the most characters of a scanner's error a finding holds
SCANNER_ERROR_LIMIT = 500
# the scan stage's own model calls (the judge scanner's), one model_call line each: never lines of the
# trajectory, which is what the scanners read
SCAN_CALLS = "scan_calls.jsonl"


def scan(job: AttemptJob) -> None:
    """scan.json: each selected scanner's finding in the attempt's transcript (its trajectory.jsonl, bounded,
    and its result.json). A scanner that raises has its error in its finding, unflagged; the others stand.

    A scanner that calls a model (``judge``) calls it as the evaluate stage's judge does: through the
    attempt's call cache and limits for the stage ``scan``, its calls recorded in ``SCAN_CALLS`` (replaced
    at each scan), scrubbed of secrets as the stage ends."""
    result = read_json(job.inputs["result"])
    folder = Path(job.folder)
    transcript = read_transcript(folder, result, job.task)
    recorded = folder / SCAN_CALLS
    recorded.unlink(missing_ok=True)  # a rescan's calls replace the last scan's
    calls = attempt_calls(job, "scan")
    limited = attempt_spend(job, "scan")

    def scan_all() -> list[ScanFinding]:  # in a context of its own: what it sets, the next job never sees
        ATTEMPT_TRAJECTORY.set(recorded)
        ATTEMPT_USAGE.set(None)  # each scanner counts its calls in its finding
        callcache.ATTEMPT_CALLS.set(calls)
        spend.ATTEMPT_SPEND.set(limited)
        return [scan_with(spec, transcript) for spec in job.request.scanners or ()]

    findings = contextvars.copy_context().run(scan_all)
    scrubber = Scrubber(job.secrets)
    if scrubber and recorded.exists():
        text = recorded.read_text(encoding="utf-8", errors="surrogateescape")
        scrubbed = scrubber.json_lines(text)
        if scrubbed != text:
            write_bytes_atomic(recorded, scrubbed.encode("utf-8", errors="surrogateescape"))
    job.write("scan", ScanRecord(task_id=str(result.get("task_id", job.task.task_id)), attempt=job.attempt,
                                 flagged=any(f.flagged for f in findings), scanners=findings),
              secrets=job.secrets)


def scan_with(spec: ScannerSpec, transcript: Transcript) -> ScanFinding:
    """The finding of the scanner ``spec`` selects in ``transcript``."""
    scanner = SCANNERS.get(spec.id)()
    try:
        finding = scanner.scan(transcript, scanner.build_config(spec.params))
    except Exception as exc:  # a scanner's failure is its finding's, never the attempt's
        LOG.warning(f"scanner {spec.id} failed on {transcript.result.get('task_id')}: {type(exc).__name__}: {exc}")
        return ScanFinding(id=spec.id, version=scanner.version, flagged=False, category=scanner.category,
                           confidence=0.0, params=dict(spec.params),
                           error=f"{type(exc).__name__}: {exc}"[:SCANNER_ERROR_LIMIT])
    return finding
