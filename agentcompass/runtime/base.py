"""Component interfaces: Benchmark, Harness, Environment (and its session), Recipe, Analyzer, Scanner."""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from agentcompass.tools import ToolMountError
from agentcompass.errors import DeadlineError, InfrastructureError
from agentcompass.secrets import resolve_secret

from .config.benchmark import RuntimeBenchmarkConfig
from .config.fields import ComponentConfig, build_component_config
from .dependencies import DependencySpec
from .models import (
    BenchmarkPlan,
    EnvironmentSpec,
    ExecutionPlan,
    HarnessPlan,
    MetricResult,
    ModelSpec,
    NetworkPolicy,
    PreparedTask,
    RunRequest,
    RunResult,
    ScanEvidence,
    ScanFinding,
    TaskSpec,
    TaskStatus,
)
from .transcript import Transcript

if TYPE_CHECKING:
    import pandas


class _Component:
    """What every registered component shares: an id, a version and a config class."""

    id: ClassVar[str] = ""
    # Bump when a change alters what the component writes: the stages that use it rerun.
    version: ClassVar[str] = "1"
    config_class: ClassVar[type] = ComponentConfig
    description: ClassVar[str] = ""
    # Optional packages it imports; a request that selects it fails before any job when one is missing.
    dependencies: ClassVar[tuple[DependencySpec, ...]] = ()

    def required_dependencies(self, config: Any) -> tuple[DependencySpec, ...]:
        """The dependencies this built config needs (all declared ones unless a component says otherwise)."""
        return self.dependencies

    @classmethod
    def summary(cls) -> str:
        text = cls.description or cls.__doc__ or ""
        return text.strip().splitlines()[0] if text.strip() else ""


# --- Deadlines of the host's waits on what the agent can touch (docs/security.md, "Bounds and deadlines") ---

# One call of the host into a session (a file call: read_text, write_text, upload, download, exists, is_dir;
# a command the host runs after the agent, such as removing the agent's state): a root agent can stop the
# helper that carries it out or replace the program it runs. Past it, what the call started is ended and
# it raises ``DeadlineError``. A session's ``call_timeout`` holds it; a caller may lower it per session.
CALL_TIMEOUT = 600.0
# The run stage's work in the run session after the harness returned (``after_run``, copying the outputs
# and the final workspace out): above a copy's worth of ``CALL_TIMEOUT`` and SWE-bench's 600 s diff.
AFTER_RUN_TIMEOUT = 1800.0
# The evaluate stage of one attempt may take the Benchmark's own time limits (``evaluation_seconds``) and
# this much more: copying the answer in, a grader's own work, a judge's calls.
EVALUATE_GRACE = 1800.0


async def after_agent(session: "EnvironmentSession", argv: list[str], what: str, **kwargs: Any) -> "ExecResult":
    """``argv`` run in ``session`` by the host after the agent ran (removing its state, reading what it
    left): within the session's ``call_timeout``, as every program there may be the agent's; past it,
    ``DeadlineError`` (what the command started is ended first)."""
    seconds = session.call_timeout
    ran = await session.exec(argv, timeout=seconds, **kwargs)
    if ran.timed_out:
        raise DeadlineError(what, seconds)
    return ran


def cancelling() -> bool:
    """Whether the running task is being cancelled (a ``finally`` after its time limit)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


# --- Benchmarks --------------------------------------------------------------


PlanT = TypeVar("PlanT", bound=BenchmarkPlan)


class BaseBenchmark(_Component, abc.ABC, Generic[PlanT]):
    """Loads tasks, plans an attempt, prepares harness input, evaluates and aggregates."""

    plan_class: ClassVar[type] = BenchmarkPlan
    config_class: ClassVar[type] = RuntimeBenchmarkConfig

    def build_config(self, req: RunRequest):
        return build_component_config(
            self.config_class, req.benchmark.params, f"benchmark {self.id!r} params"
        )

    @abc.abstractmethod
    def load_tasks(self, req: RunRequest) -> list[TaskSpec]:
        """All tasks of the Benchmark, with stable ids, in a deterministic order."""

    def select_tasks(self, tasks: list[TaskSpec], req: RunRequest) -> list[TaskSpec]:
        """Filter by ``task_ids`` and ``categories``, then cut at ``limit``; order is kept."""
        config = self.build_config(req)
        selected = list(tasks)
        if config.task_ids is not None:
            known = {t.task_id for t in tasks}
            missing = [t for t in config.task_ids if t not in known]
            if missing:
                raise ValueError(
                    f"benchmark {self.id!r}: task_ids {missing} do not exist; "
                    f"the first known ids are {[t.task_id for t in tasks[:5]]}"
                )
            wanted = set(config.task_ids)
            selected = [t for t in selected if t.task_id in wanted]
        if config.categories is not None:
            wanted = set(config.categories)
            selected = [t for t in selected if t.category in wanted]
        if config.limit is not None:
            selected = selected[: config.limit]
        return selected

    def resolve_evaluation_environment_mode(self, req: RunRequest) -> str:
        """The Benchmark's default: evaluate in the task environment."""
        return "task"

    def build_plan(self, task: TaskSpec, req: RunRequest, environment: EnvironmentSpec) -> BenchmarkPlan:
        """Benchmark-private settings of one attempt. Opens nothing, calls no model."""
        return self.plan_class()

    def _require_plan(self, plan: BenchmarkPlan) -> PlanT:
        """``plan`` as this Benchmark's own plan class (declare it: ``BaseBenchmark[MyPlan]``)."""
        if not isinstance(plan, self.plan_class):
            raise TypeError(f"{self.id} requires {self.plan_class.__name__}, got {type(plan).__name__}")
        return cast(PlanT, plan)

    @abc.abstractmethod
    async def prepare_task(
        self, task: TaskSpec, env: "EnvironmentSession", req: RunRequest, plan: BenchmarkPlan
    ) -> PreparedTask:
        """Harness-facing input; may create a workspace through ``env``. Must be repeatable."""

    @abc.abstractmethod
    async def evaluate(
        self,
        task: TaskSpec,
        prepared: PreparedTask,
        result: RunResult,
        env: "EnvironmentSession",
        req: RunRequest,
        plan: BenchmarkPlan,
    ) -> RunResult:
        """Score ``result`` (the harness output) and return the evaluated copy."""

    async def after_run(
        self, prepared: PreparedTask, result: RunResult, env: "EnvironmentSession", req: RunRequest,
        plan: BenchmarkPlan,
    ) -> RunResult:
        """In the run-phase session, right after the harness: take what evaluation needs from it.

        For a Benchmark whose answer is the state the agent left (SWE-bench's
        diff of the repository) rather than anything the harness returns.
        Returns the (unscored) result, by default unchanged. What it reads in
        ``env`` is the agent's doing: treat it as hostile data.
        """
        _ = prepared, env, req, plan
        return result

    def reference_solution(self, task: TaskSpec, plan: BenchmarkPlan) -> Any:
        """The reference, handed only to a harness that declares itself an oracle.

        Either a value the oracle submits as its answer, or a ``ScriptReference``:
        a program the oracle runs in its run-phase session (Harbor's ``solve.sh``).
        """
        raise NotImplementedError(f"benchmark {self.id!r} has no reference solution for the oracle")

    def evaluation_seconds(self, plan: BenchmarkPlan) -> float:
        """Seconds the Benchmark's own time limits let one evaluation take (a verifier's or a test run's
        timeout); the evaluate stage's deadline is this plus ``EVALUATE_GRACE``. 0 by default."""
        _ = plan
        return 0.0

    def source_fingerprint(self, req: RunRequest) -> str | None:
        """A digest of the files ``load_tasks`` reads from the user's disk (a task folder).

        When it changes, the task list is loaded again and every stage whose
        inputs changed reruns. None (the default) for data that ships with code.
        """
        return None

    def evaluation_models(self, req: RunRequest) -> list[ModelSpec]:
        """Models that ``evaluate`` calls itself (a judge): each evaluate job takes one unit of
        each one's endpoint resource, as a run job does of the request's Model. None by default."""
        return []

    def aggregate_metrics(self, results: list[RunResult], req: RunRequest) -> MetricResult:
        """Accuracy over attempts (errors count as incorrect) and counts by status."""
        counts: dict[str, int] = {}
        for r in results:
            counts[r.status.value] = counts.get(r.status.value, 0) + 1
        scored = [r.score if r.score is not None else 0.0 for r in results]
        metrics = {
            "accuracy": (sum(1 for r in results if r.correct) / len(results)) if results else None,
            "mean_score": (sum(scored) / len(scored)) if scored else None,
        }
        return MetricResult(
            benchmark_id=self.id,
            metrics=metrics,
            counts=counts,
            num_tasks=len({r.task_id for r in results}),
            num_attempts=len(results),
        )


class HarnessFreeBenchmark(BaseBenchmark[PlanT]):
    """A Benchmark that runs its own model interaction (``harness: none``)."""

    @abc.abstractmethod
    async def run_task(
        self, prepared: PreparedTask, env: "EnvironmentSession", req: RunRequest, plan: ExecutionPlan
    ) -> RunResult:
        """Run the attempt and return its (unscored) result."""


# --- Harnesses ---------------------------------------------------------------


@dataclass
class ScriptReference:
    """A reference solution that is a program, not a value: the oracle runs it in its session.

    ``source`` (a local directory) is copied to ``target`` in the run-phase
    session, ``script`` (a path inside it) runs from the session's working
    directory under ``env`` (its ``${VAR}`` references resolved there, in the
    job that runs it) and ``timeout``, and the copy is removed again, so
    the reference never stays in the workspace that is evaluated. Its fields
    are what the oracle's run depends on (``fingerprint``: a digest of
    ``source``), so a changed script reruns the oracle.
    """

    source: str
    script: str
    target: str = "/solution"
    env: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None
    fingerprint: str = ""

    async def place(self, session: "EnvironmentSession") -> str:
        """Copy the reference into ``session``; return where its directory is there."""
        await session.upload(Path(self.source), self.target)
        return self.target

    async def run(self, session: "EnvironmentSession") -> "ExecResult":
        target = await self.place(session)
        script = posixpath.join(target, self.script)
        try:
            # through the script's own #! line, as Harbor runs solve.sh
            return await session.exec(
                ["sh", "-c", 'chmod +x "$1" && exec "$1"', "sh", script], env=resolve_secret(dict(self.env)),
                timeout=self.timeout,
            )
        finally:
            if not cancelling():  # a cancelled attempt (its time limit) is not evaluated: no wait on its session
                await after_agent(session, ["rm", "-rf", target], f"removing the reference solution {target}")


@dataclass
class HarnessContext:
    """What the run stage hands a harness besides its input: not persisted."""

    attempt: int
    attempt_dir: Path
    trajectory_path: Path
    # Only for a harness with ``is_oracle = True``: the Benchmark's reference.
    reference: Any = None
    timeout: float | None = None
    extras: dict[str, Any] = field(default_factory=dict)


class BaseHarness(_Component, abc.ABC):
    """The agent: consumes a PreparedTask and the Model, acts in the Environment."""

    plan_class: ClassVar[type] = HarnessPlan
    # A trusted reference harness: the run stage asks the Benchmark for its reference.
    is_oracle: ClassVar[bool] = False
    requires_model: ClassVar[bool] = True
    # The ``ModelSpec.protocol`` values of the Models it can call (a harness that calls its Model through a
    # ModelClient speaks chat completions only); a Model of another is a config error before any job runs.
    model_protocols: ClassVar[tuple[str, ...]] = ("openai_chat",)

    def build_config(self, req: RunRequest):
        return build_component_config(self.config_class, req.harness.params, f"harness {self.id!r} params")

    def build_plan(self, task: TaskSpec, req: RunRequest, environment: EnvironmentSpec) -> HarnessPlan:
        config = self.build_config(req)
        return self.plan_class(harness_id=self.id, params=dataclasses.asdict(config))

    def tools(self, config: Any) -> tuple[str, ...]:
        """The tool keys (``"claude-code@2.1.328"``, ``agentcompass.tools``) this built config runs: the
        planner puts them in the task environment's spec, and the environment installs them (once per
        key, in the tool cache) and mounts them read-only when it opens (``EnvironmentSession.tools``).
        None by default."""
        _ = config
        return ()

    @abc.abstractmethod
    async def run(
        self,
        prepared: PreparedTask,
        env: "EnvironmentSession",
        req: RunRequest,
        plan: HarnessPlan,
        context: HarnessContext,
    ) -> RunResult:
        """Run one attempt; return status, answer, usage and errors (no score)."""


# --- Environments ------------------------------------------------------------


# The most of each stream (stdout, stderr) of one command that a session keeps: its first and its last half.
# What lies between is read and dropped, and a line in its place says how many bytes; ``ExecResult.cut``
# counts them.
OUTPUT_LIMIT = 1 << 20


class CappedOutput:
    """One stream of a command as a session keeps it: the first and last ``limit // 2`` bytes, the rest counted.

    Holds at most ``limit`` bytes and one chunk more (the tail is trimmed in bulk), whatever the command prints.
    """

    def __init__(self, limit: int = OUTPUT_LIMIT) -> None:
        self.half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            excess = len(self.tail) - self.half
            if excess > self.half:
                del self.tail[:excess]
                self.dropped += excess

    @property
    def cut(self) -> int:
        """How many bytes were dropped from the middle."""
        return self.dropped + max(len(self.tail) - self.half, 0)

    def text(self) -> str:
        tail = self.tail[-self.half:] if len(self.tail) > self.half else self.tail
        if not self.cut:
            return (self.head + tail).decode(errors="replace")
        return (self.head.decode(errors="replace")
                + f"\n[agentcompass: {self.cut} bytes of this output cut here; a session keeps the first and the "
                f"last {self.half} bytes of what a command prints on each stream]\n"
                + tail.decode(errors="replace"))


@dataclass
class ExecResult:
    """The outcome of one command in a session.

    ``stdout`` and ``stderr`` hold at most about ``OUTPUT_LIMIT`` bytes each (``CappedOutput``); ``cut`` is how
    many bytes were dropped from their middles.
    """

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False
    cut: int = 0

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


# How long ``EnvironmentSession.end_processes`` may take before it is an error (each provider's own).
END_PROCESSES_SECONDS = 10.0


class EnvironmentSession(abc.ABC):
    """An open sandbox: commands, files, endpoints and network switching."""

    # Seconds one file call may take (``CALL_TIMEOUT``), and a command the host runs after the agent
    # (``after_agent``); past it the call's processes are ended and it raises ``DeadlineError``.
    call_timeout: float = CALL_TIMEOUT
    _tools: dict[str, str] | None = None

    @property
    def tools(self) -> dict[str, str]:
        """Each tool key of the spec (``EnvironmentSpec.tools``) -> its folder as commands in the session
        see it, mounted read-only at open (empty when the spec names none)."""
        if self._tools is None:
            self._tools = {}
        return self._tools

    @tools.setter
    def tools(self, value: dict[str, str]) -> None:
        self._tools = dict(value)

    @abc.abstractmethod
    async def exec(
        self,
        cmd: list[str] | str,
        *,
        shell: bool = False,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        input: str | bytes | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (argv list with ``shell=False``, a string with ``shell=True``).

        ``user`` (a name or uid in the sandbox; None: the sandbox's default user) runs it as
        that user; an unknown user is exit status 126 with "unable to find user" on stderr. A
        command killed by signal N exits with 128+N.
        """

    @abc.abstractmethod
    async def upload(self, local: Path, remote: str) -> None:
        """Copy a local file or directory into the session.

        A directory merges into an existing one; a file onto an existing directory raises
        ``IsADirectoryError``.
        """

    @abc.abstractmethod
    async def download(self, remote: str, local: Path) -> None:
        """Copy a file or directory out of the session."""

    @abc.abstractmethod
    async def read_text(self, path: str) -> str: ...

    @abc.abstractmethod
    async def write_text(self, path: str, text: str) -> None: ...

    @abc.abstractmethod
    async def exists(self, path: str) -> bool: ...

    @abc.abstractmethod
    async def is_dir(self, path: str) -> bool: ...

    async def endpoint(self, port: int) -> str:
        """The address at which a service listening on ``port`` inside is reached."""
        raise NotImplementedError(f"{type(self).__name__} does not expose endpoints")

    async def expose_host_socket(self, socket_path: Path) -> str:
        """Make a Unix socket of this machine reachable from commands in the session.

        Returns the ``127.0.0.1:PORT`` at which commands inside reach it, whatever
        the session's network policy: under ``none`` this is the one hole, and
        it leads only to that socket (a per-attempt model gateway). It lasts
        until the session closes or switches its network.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot expose a host socket")

    async def set_network(self, policy: NetworkPolicy) -> None:
        """Switch the session's network to ``policy`` (between phases)."""
        raise NotImplementedError(f"{type(self).__name__} cannot switch networks")

    async def end_processes(self) -> None:
        """End every process of the session but the provider's own init; return once none is left.

        Called before a verifier's results are read (``task_dir``'s reward files, SWE-bench's test log):
        a verifier that runs the agent's code may leave a process behind it, and nothing of the agent
        may run while the verdict is read. Raises ``RuntimeError`` if the processes cannot be ended.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot end its processes, so no verdict can be read in it")

    async def exec_and_end(self, cmd: list[str], *, timeout: float | None = None, env: dict[str, str] | None = None,
                           cwd: str | None = None) -> ExecResult:
        """``exec(cmd)`` (an argv list), then ``end_processes()`` before this returns: a verifier's run.

        A provider that can ends the session's processes from inside it the moment ``cmd`` exits, so
        that a process waiting for the verifier to exit gets no time to write after it; this one ends
        them once the command is seen to have exited.
        """
        ran = await self.exec(cmd, timeout=timeout, env=env, cwd=cwd)
        await self.end_processes()
        return ran

    @property
    @abc.abstractmethod
    def workdir(self) -> str:
        """The working directory commands start in."""

    @abc.abstractmethod
    async def close(self, *, failed: bool = False, retain: str | None = None) -> None:
        """End the session. ``retain`` ('never', 'on_failure', 'always'; None = the
        provider's own setting) says whether to keep the sandbox for debugging,
        given whether the attempt ``failed``."""

    async def __aenter__(self) -> "EnvironmentSession":
        return self

    async def __aexit__(self, exc_type, *exc) -> None:
        await self.close(failed=exc_type is not None)


# InfrastructureError (agentcompass.errors): a fault of the sandbox or of the way to it, not
# of the agent. Providers raise one of the subclasses below, translated from what their engine
# or their processes report; ``retryable`` says which of them the run stage retries.


class EnvironmentUnavailableError(InfrastructureError):
    """The engine cannot be reached, or cannot open a sandbox now: retried."""


class SandboxDiedError(InfrastructureError):
    """The sandbox died or vanished mid-attempt (its container, or a host_process session's network holder): retried."""


class SandboxEndedFromInsideError(SandboxDiedError):
    """The sandbox died of what ran in it (its init ended by the agent's commands, its memory or
    process limits exhausted): the attempt's own failure, NOT retried, so an agent cannot reroll
    itself by ending its sandbox."""


class SandboxConnectionError(InfrastructureError):
    """The connection to an open sandbox dropped (a call to its engine was cut off): retried."""


class ImageBuildError(InfrastructureError):
    """The sandbox's image could not be built from its Dockerfile: NOT retried.

    A failing ``RUN`` step or a Dockerfile the engine cannot parse fails the
    same way on every try, so a retry would only repeat the build; the error
    carries the end of the build log instead. An engine that cannot be reached
    during a build raises ``EnvironmentUnavailableError``, which is retried.
    """


class ImageMissingError(InfrastructureError):
    """The sandbox's image is not on the engine (nothing is pulled): NOT retried.

    It will be missing on every try; the message names the image and how to
    fetch or build it.
    """


# Whether the run stage retries a fault, by its type; the most specific entry
# in the exception's class hierarchy decides. Any other exception is the
# attempt's own failure, never retried.
_RETRIED: dict[type[InfrastructureError], bool] = {
    InfrastructureError: True,
    EnvironmentUnavailableError: True,
    SandboxDiedError: True,
    SandboxEndedFromInsideError: False,
    SandboxConnectionError: True,
    ImageBuildError: False,
    ImageMissingError: False,
    ToolMountError: False,
}


def retryable(exc: BaseException) -> bool:
    """Whether the run stage retries an attempt that raised ``exc`` (under ``execution.max_retries``)."""
    for cls in type(exc).__mro__:
        if cls in _RETRIED:
            return _RETRIED[cls]
    return False


def keeps(retain: str | None, default: str, failed: bool) -> bool:
    """Whether a sandbox is kept at close: ``retain`` if given, else the provider's ``default``."""
    policy = retain or default
    return policy == "always" or (policy == "on_failure" and failed)


@dataclass
class CleanReport:
    """What ``agentcompass clean`` found, and removed unless it was a dry run: a line per process, workspace,
    container and sandbox folder, and notes (what could not be checked)."""

    processes: list[str] = field(default_factory=list)
    workspaces: list[str] = field(default_factory=list)
    containers: list[str] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class BaseEnvironment(_Component, abc.ABC):
    """A provider that opens sessions."""

    @classmethod
    def clean_leftovers(cls, run_id: str | None, include_live: bool, dry_run: bool, report: CleanReport) -> None:
        """Remove what this provider's sessions left on the machine once their agentcompass process is gone
        (``agentcompass clean`` calls it once per registered class), each thing as a line of ``report``.

        ``run_id`` limits it to one run's sessions (labels ``<run_id>-...``); ``include_live`` also takes
        those whose owner still runs, and what retention kept; ``dry_run`` only lists. The default: a
        provider whose sessions leave nothing behind."""

    def build_config(self, spec: EnvironmentSpec):
        return build_component_config(self.config_class, spec.params, f"environment {self.id!r} params")

    def validate_spec(self, spec: EnvironmentSpec) -> None:
        """Raise ``ConfigError`` if a planned spec (after Recipes) could never open."""
        self.build_config(spec)

    def resolve_network_policy(self, policy: NetworkPolicy, phase: str) -> NetworkPolicy:
        """Validate a phase policy this provider must enforce; raise if it cannot."""
        return policy

    @abc.abstractmethod
    async def open(self, spec: EnvironmentSpec, network: NetworkPolicy, label: str) -> EnvironmentSession:
        """Open a fresh session under ``network``; ``label`` names the run and attempt."""


# --- Recipes and Analyzers ---------------------------------------------------


class BaseRecipe(_Component, abc.ABC):
    """A planning-time adapter of an ExecutionPlan. Never opens an Environment."""

    # The Benchmark ids whose plans it may adapt (empty: any). The planner asks only those
    # requests' plans, and only those requests' plans are rebuilt when it changes or is added.
    benchmarks: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def may_adapt(cls, req: RunRequest) -> bool:
        """Whether this Recipe may adapt any plan of ``req`` (its ``benchmarks``)."""
        return not cls.benchmarks or req.benchmark.id in cls.benchmarks

    @abc.abstractmethod
    def matches(self, req: RunRequest, task: TaskSpec, plan: ExecutionPlan) -> bool: ...

    @abc.abstractmethod
    def apply(self, plan: ExecutionPlan, req: RunRequest, task: TaskSpec) -> ExecutionPlan:
        """Return an adapted copy of ``plan``, keeping compatible explicit user values."""


class BaseAnalyzer(_Component, abc.ABC):
    """Reads finished results and writes reports."""

    @abc.abstractmethod
    def analyze(self, req: RunRequest, results: "pandas.DataFrame", out_dir: Path) -> list[Path]:
        """Write report files into ``out_dir`` (``results/<ns>/<run_id>/reports/<id>/``); return their paths.

        ``results`` holds every attempt of the request, one row each, with the
        columns ``agentcompass.results.load`` returns (``agentcompass.results.COLUMNS``).
        """


class BaseScanner(_Component, abc.ABC):
    """Reads one attempt's transcript and says whether it shows a kind of misbehaviour (the scan stage).

    A scanner never changes a score: its finding stands beside it in the attempt's scan.json. Its
    ``version`` and parameters are the scan stage's fingerprint: a new one, or a change of one, rescans
    the attempts and never reruns the agent or its evaluation. The transcript is the agent's text,
    untrusted: a scanner reads it, never runs or follows anything in it, and quotes it only through
    ``agentcompass.runtime.transcript.quote``."""

    # the category its flags are in (``grader_access``, ``history_rewrite``, ``network``, ``gave_up``, ...)
    category: ClassVar[str] = ""

    def build_config(self, params: dict[str, Any]) -> Any:
        return build_component_config(self.config_class, params, f"scanner {self.id!r} params")

    def models(self, config: Any) -> list[ModelSpec]:
        """The Models it calls with its built ``config`` (a judge's; none for most): the request's checks cover
        them before any job runs, as they cover a Benchmark's ``evaluation_models``."""
        _ = config
        return []

    @abc.abstractmethod
    def scan(self, transcript: Transcript, config: Any) -> ScanFinding:
        """The finding of this scanner (``finding`` makes one) in ``transcript``, with its built ``config``."""

    def finding(self, flagged: bool, confidence: float, evidence: list[ScanEvidence] | None = None,
                params: dict[str, Any] | None = None, error: str | None = None) -> ScanFinding:
        return ScanFinding(id=self.id, version=self.version, flagged=flagged, category=self.category,
                           confidence=confidence, evidence=list(evidence or []), params=dict(params or {}),
                           error=error)


def error_result(task_id: str, attempt: int, stage: str, exc: BaseException | str) -> RunResult:
    """An attempt that failed in ``stage`` ('run' or 'evaluate')."""
    status = TaskStatus.RUN_ERROR if stage == "run" else TaskStatus.EVAL_ERROR
    message = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    return RunResult(task_id=task_id, attempt=attempt, status=status, error=message, error_stage=stage)
