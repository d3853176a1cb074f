"""Progress events: what a run does, appended as JSON lines to ``results/<ns>/<run_id>/events.jsonl``.

The lines' contracts are the ``Event`` classes of ``files`` (``schemas/event.schema.json``);
the Events section of docs/reports.md is what a reader may rely on. Who writes what:

- the outer run (the invocation's own Snakemake), per request: ``request_started``
  when its jobs are about to start, and ``request_finished`` with the outcome at
  its end;
- every Snakemake that runs an attempt's jobs (the outer run, a shard's inner run):
  ``attempts_planned``, how many attempts it builds, as soon as its DAG holds them
  (at its start, or once the request's task list and plans are written); the
  outer run counts a shard that will run as its whole slice, the shard's inner
  run then counts exactly, and the outer run counts again what the shard built
  once it has ended;
- the job that starts an attempt in this invocation: ``execution_plan_resolved``
  and ``attempt_started``; the job that writes its result.json: ``attempt_finished``.

An attempt starts in this invocation with its first stage job here: prepare;
run when its prepared.json is older than the invocation (reused); evaluate when
its output.json is (a regrade). A file is older than the invocation when it was
last written before the invocation started: every file of an attempt is written
by rename, so its time says when it was built. Inner runs and cluster jobs get the
outer run's id and start in their environment.

An events file is a log, never a result: nothing reads it to decide what to
build, and failing to write it never fails a job (it says so once).
"""

from __future__ import annotations

import datetime
import json
import os
import threading
from pathlib import Path
from typing import Any, Callable, Iterable

from agentcompass import layout, results
from agentcompass._util import jsonio
from agentcompass._util.logs import LOG
from agentcompass.runtime.models import ExecutionPlan, RunRequest, RunResult
from agentcompass.stages import LAST_ATTEMPT_STAGE, where
from agentcompass.stages import stage as stage_of

from . import engine, lifecycle, provenance, shards
from .files import (
    AttemptFinished,
    AttemptsPlanned,
    AttemptStarted,
    ExecutionPlanResolved,
    RequestFinished,
    RequestStarted,
)

EVENTS_FILE = layout.EVENTS
SHARD_RULES = tuple(s.name for s in where(slices_attempts=True))
# the outer run's start (seconds since the epoch), for inner runs and cluster jobs
STARTED_ENV = "AGENTCOMPASS_INVOCATION_STARTED"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


class Emitter:
    """This process's writer of events (one per Snakemake invocation of the workflow)."""

    def __init__(self, inv, targets) -> None:
        self.inv = inv
        self.targets = targets
        # each request's events file size when this invocation began: its events come after
        self.offsets: dict[tuple[str, str], int] = {}
        self._paths: dict[tuple[str, str], str] = {}
        self._identity: tuple[str, float, str, int, int | None] | None = None
        self._announced: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._warned = False

    # -- who writes ---------------------------------------------------------------------------

    def _handed_down(self) -> bool:
        """An inner run or a cluster job: its invocation is the outer run's, from the environment."""
        workflow = self.inv.snakemake
        return self.inv.inner is not None or (workflow is not None and not engine.is_main_process(workflow))

    def _ident(self) -> tuple[str, float, str, int, int | None]:
        """(invocation id, its start, host, pid, inner shard), looked up once the workflow is bound."""
        if self._identity is None:
            invocation, started = self.inv.nonce, self.inv.started
            if self._handed_down():
                invocation = os.environ.get(shards.INVOCATION_ENV) or invocation
                try:
                    started = float(os.environ[STARTED_ENV])
                except (KeyError, ValueError):
                    pass
            shard = self.inv.inner[2] if self.inv.inner is not None else None
            self._identity = (invocation, started, provenance.here()["host"], os.getpid(), shard)
        return self._identity

    @property
    def invocation(self) -> str:
        return self._ident()[0]

    def path(self, req: RunRequest) -> str:
        key = (req.namespace, req.run_id)
        path = self._paths.get(key)
        if path is None:
            path = self._paths[key] = str(self.inv.run_path(req) / EVENTS_FILE)
        return path

    def _builds(self) -> bool:
        workflow = self.inv.snakemake
        return workflow is not None and engine.executing(workflow) and engine.is_main_process(workflow)

    def _emit(self, req: RunRequest, cls: type, **fields: Any) -> None:
        invocation, _, host, pid, shard = self._ident()
        fields.setdefault("shard", shard)
        try:
            event = cls(time=_now(), invocation=invocation, host=host, pid=pid, request=req.metadata.request_name,
                        namespace=req.namespace, run_id=req.run_id, **fields)
            jsonio.append_line(self.path(req), event.to_dict())
        except (OSError, ValueError) as exc:
            if not self._warned:
                self._warned = True
                LOG.warning(f"could not append an event to {self.path(req)} ({type(exc).__name__}: {exc}); "
                            f"the run goes on (events are a log, not a result)")

    # -- the outer run: the invocation begins, starts and ends ---------------------------------------

    def begin(self) -> None:
        """The outer run holds its folders' locks: note where its events start, and hand its identity down."""
        for req in self.inv.requests:
            try:
                size = os.stat(self.path(req)).st_size
            except OSError:
                size = 0
            self.offsets[(req.namespace, req.run_id)] = size
        os.environ[shards.INVOCATION_ENV] = self.inv.nonce
        os.environ[STARTED_ENV] = repr(self.inv.started)

    def withdraw(self) -> None:
        os.environ.pop(shards.INVOCATION_ENV, None)
        os.environ.pop(STARTED_ENV, None)

    def run_started(self) -> None:
        """The jobs are about to start (Snakemake's ``onstart``)."""
        if not self._builds():
            return
        if self.inv.inner is None:
            for req in self.inv.requests:
                self._emit(req, RequestStarted, benchmark=req.benchmark.id, harness=req.harness.id, model=req.model.id,
                           environment=req.environment.id, attempts_per_task=req.execution.attempts)
        for req in self.inv.requests:
            if self.inv.inner is not None:
                if self.inv.is_inner_of(req):
                    self.announce(req)
            elif self.targets.fingerprints.settled(req):
                # its DAG is whole now; otherwise its attempts are known once its plans are written
                self.announce(req)

    def run_finished(self, ok: bool) -> None:
        """The run is over (``onsuccess``/``onerror``): each request's outcome, as the SDK reports it."""
        if not self._builds() or self.inv.inner is not None:
            return
        try:
            result = results.outcomes(self.inv.orchestration, ok, reason=lifecycle.end_reason(ok),
                                      targets=engine.named_targets(self.inv.snakemake))
        except Exception as exc:  # a log line is not worth failing the run's end for
            LOG.warning(f"the request_finished events were not written: {type(exc).__name__}: {exc}")
            return
        for req, outcome in zip(self.inv.requests, result.outcomes):
            self._emit(req, RequestFinished, outcome=outcome)

    # -- what this process builds ------------------------------------------------------------------

    def announce(self, req: RunRequest) -> None:
        """``attempts_planned`` of the request, once per process, from the jobs Snakemake's DAG holds."""
        key = (req.namespace, req.run_id)
        if key in self._announced:
            return
        if not self._builds():
            return
        with self._lock:
            if key in self._announced:
                return
            self._announced.add(key)
        jobs = engine.planned_jobs(self.inv.snakemake)
        if jobs is None:
            return
        mine = [(rule, w) for rule, w in jobs if w.get("ns") == req.namespace and w.get("run_id") == req.run_id]
        if self.inv.inner is None and self.targets.shard_count(req):
            running = sorted({int(w["shard"]) for rule, w in mine if rule in SHARD_RULES})
            for index in running:
                self._emit(req, AttemptsPlanned, shard=index, attempts=len(self.targets.shard_slice(req, index)),
                           exact=False)
            if running:
                return
        attempts = {(w["task"], w["attempt"]) for rule, w in mine if rule in shards.ATTEMPT_RULES}
        self._emit(req, AttemptsPlanned, attempts=len(attempts), exact=True)

    def shard_built(self, req: RunRequest, index: int, attempts: list[tuple[str, int]]) -> None:
        """A shard's inner run ended well: how many attempts it built, from their result.json
        (an inner run with nothing to build never starts its jobs, and says nothing itself)."""
        last = stage_of(LAST_ATTEMPT_STAGE)
        built = sum(self._built_now(layout.file_in(self.targets.attempt_dir(req, s, a), last)) for s, a in attempts)
        self._emit(req, AttemptsPlanned, shard=index, attempts=built, exact=True)

    def _built_now(self, path: str) -> bool:
        """Whether ``path`` was written since the invocation started (by one of its jobs)."""
        try:
            return os.stat(path).st_mtime >= self._ident()[1]
        except OSError:
            return False

    def attempt_job(self, req: RunRequest, stage: str, plan: ExecutionPlan, reused: str | None = None) -> None:
        """A stage job of an attempt starts; ``reused`` is the previous stage's file (none for the first).

        The attempt starts here unless that file was built in this invocation.
        """
        self.announce(req)
        if reused is not None and self._built_now(reused):
            return
        self._emit(req, ExecutionPlanResolved, task_id=plan.task_id, attempt=plan.attempt, plan=plan.audit_view())
        self._emit(req, AttemptStarted, task_id=plan.task_id, attempt=plan.attempt, stage=stage)

    def attempt_finished(self, req: RunRequest, result: RunResult, upstream: list[tuple[str, str]],
                         stage: str) -> None:
        """The attempt's last stage ``stage`` wrote its result; ``upstream`` are the (stage, file) it was
        built from, of which those built in this invocation ran for it too."""
        ran = [name for name, path in upstream if self._built_now(path)]
        self._emit(req, AttemptFinished, task_id=result.task_id, attempt=result.attempt, status=result.status,
                   score=result.score, correct=result.correct, error_stage=result.error_stage,
                   stages=[*ran, stage], usage=dict(result.usage))


# -- reading ------------------------------------------------------------------------------------------


class Follower:
    """The events appended to one events file from an offset on: complete lines, in the file's order.

    A line still being written (no newline yet) waits for the next read; a line
    that is not an event (a write cut short by a full disk) is skipped.
    """

    def __init__(self, path: str | Path, offset: int | None = None) -> None:
        self.path = str(path)
        if offset is None:
            try:
                offset = os.stat(self.path).st_size
            except OSError:
                offset = 0
        self.offset = offset

    def read(self) -> list[dict[str, Any]]:
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return []
        if size < self.offset:  # the file was removed and begun again
            self.offset = 0
        if size == self.offset:
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read(size - self.offset)
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        events = []
        for line in data[:end].split(b"\n"):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and isinstance(event.get("event"), str):
                events.append(event)
        return events


def read_events(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every event in a run's folder (``results/<ns>/<run_id>/``), in the order they were appended."""
    return Follower(Path(run_dir) / EVENTS_FILE, 0).read()


class Tail:
    """Hands ``callback`` each event one invocation appends to the events files of ``run_dirs``, as it
    appears, from a thread of its own (one event at a time, in each file's order).

    The invocation is the one whose first ``request_started`` follows the files'
    ends as they were at ``Tail``'s creation (the caller holds the folders'
    locks, so no other run starts there): events of any other invocation (a
    shard of a killed run that is still stopping) are left out.
    """

    def __init__(self, run_dirs: Iterable[str | Path], callback: Callable[[dict], Any], interval: float = 0.1) -> None:
        self.followers = [Follower(Path(d) / EVENTS_FILE) for d in run_dirs]
        self.callback = callback
        self.interval = interval
        self.invocation: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="agentcompass-events", daemon=True)
        self._failed: set[str] = set()

    def start(self) -> "Tail":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Deliver what is left, then end the thread."""
        self._stop.set()
        self._thread.join()
        self._deliver()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._deliver()

    def _deliver(self) -> None:
        for follower in self.followers:
            for event in follower.read():
                if self.invocation is None and event["event"] == "request_started":
                    self.invocation = event.get("invocation")
                if self.invocation is None or event.get("invocation") != self.invocation:
                    continue
                try:
                    self.callback(event)
                except Exception as exc:  # the caller's code: say so once per kind of failure, and go on
                    kind = type(exc).__name__
                    if kind not in self._failed:
                        self._failed.add(kind)
                        LOG.warning(f"on_event raised {kind}: {exc} (at a {event['event']} event); the run goes "
                                    f"on and later events are still passed to it")
