"""``swebench``: SWE-bench-format instances, graded by the official ``swebench`` package.

An instance (a row of SWE-bench Verified, Lite, or any set in their format,
as ``swebench`` 5 describes it: ``instance_id``, ``repo``, ``base_commit``,
``problem_statement``, ``patch``, ``test_patch``, ``FAIL_TO_PASS``,
``PASS_TO_PASS``, ``version``, ``image``, ``eval_script``, ``log_parser``,
``eval_type``) is one task. The rows come from a file the user has: JSONL,
JSON, Parquet, or a ``datasets`` ``save_to_disk`` folder. Nothing is
downloaded, at import or at load.

What each stage sees:

- plan: the instance's image (as the package names it, the registry prefix
  and tag configurable); Recipe ``swebench_verified`` puts it, the working
  folder ``/testbed`` and the network and time limits into the plan.
- run: the harness gets the problem statement in the instance's image, the
  repository at its base commit in ``/testbed`` (its working directory).
  After it, the diff of the repository from the base commit (every change,
  new files too) is taken in that session: that diff is the answer.
- evaluate: in a fresh container of the same image the diff is applied as
  the package's harness applies it, the instance's evaluation script runs,
  and its log is graded by ``swebench.harness.grading.get_eval_report`` with
  the instance's test spec (``make_test_spec``) and log parser, in a child
  process killed past ``GRADE_TIMEOUT`` (the parsers are quadratic on long
  lines, which the agent's patch can make the tests print).

The diff and the log are the agent's doing: on the host they are data of
bounded size (``max_patch_bytes``, ``max_log_bytes``), copied as one file
each, never read for paths. The oracle applies the gold patch.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import posixpath
import re
import shlex
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcompass._util import trees
from agentcompass.benchmarks.config import RuntimeBenchmarkConfig
from agentcompass.benchmarks.dataset import json_value
from agentcompass.errors import DeadlineError, InfrastructureError
from agentcompass.runtime import (
    BENCHMARKS,
    BaseBenchmark,
    BenchmarkPlan,
    EnvironmentSpec,
    PreparedTask,
    RunRequest,
    RunResult,
    TaskInput,
    TaskOutput,
    TaskSpec,
    TaskStatus,
)
from agentcompass.runtime.base import ScriptReference
from agentcompass.runtime.config import ConfigError, ParameterError, config_field, plan_field
from agentcompass.runtime.dependencies import DependencySpec

PACKAGE = "swebench"
PACKAGE_VERSION = "5.0.2"
DEPENDENCY = DependencySpec(extra="swebench", imports=("swebench",), pip="pip install 'agentcompass[swebench]'")
# the fields make_test_spec reads, and those the task itself needs
REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch", "FAIL_TO_PASS",
            "PASS_TO_PASS", "version", "image", "eval_script", "log_parser", "eval_type")
# never in PreparedTask: the answer and how it is checked
GROUND_TRUTH = ("patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS")
WORKDIR = "/testbed"  # the package's CONTAINER_WORKDIR: where the instance images hold the repository
# in the run session after the agent, and in the evaluation session: outside the repository
PATCH_FILE = "/tmp/agentcompass-swebench/model.patch"
EVAL_SCRIPT = "/tmp/agentcompass-swebench/eval.sh"
EVAL_LOG = "/tmp/agentcompass-swebench/test_output.txt"
DIFF_TIMEOUT = 600.0
# Grading one test log with the package's parsers, in a process of its own: they are quadratic on lines
# the agent's patch can print (a 400 KB line keeps one busy for hours), so past this the grader is killed
# and the evaluation fails (DeadlineError, class ``limit``).
GRADE_TIMEOUT = 120.0
# The grader's process: the package's own calls on the instance, the prediction and the log file (JSON on
# stdin), the report and the statuses of the tests it found as JSON on stdout. Nothing is imported from
# the working folder (-I).
_GRADER = (
    "import json, sys\n"
    "from swebench.harness.grading import get_eval_report, get_logs_eval\n"
    "from swebench.harness.utils import make_test_spec\n"
    "job = json.load(sys.stdin)\n"
    "spec = make_test_spec(job['instance'])\n"
    "iid = job['prediction']['instance_id']\n"
    "report = get_eval_report(spec, job['prediction'], job['log'], include_tests_status=True)[iid]\n"
    "statuses = get_logs_eval(spec, job['log'])[0] if job['statuses'] else {}\n"
    "json.dump({'report': report, 'statuses': statuses}, sys.stdout)\n"
)
_TAIL = 4000
# the diff of everything the agent changed, new files too, from the base commit; no driver of the repository's
# own config runs (external diff, textconv); then its size in bytes, the one line it prints, measured in the
# session so that a diff over max_patch_bytes is refused before a byte of it is copied to the host (stat: never
# opened, so a link to an endless device or a FIFO put in its place makes no wait; none printed, it is copied)
_DIFF = (
    'set -e; mkdir -p "$(dirname "$3")"; rm -rf "$3"; cd "$1"; '
    'git -c core.fileMode=false add -A >/dev/null; '
    'git -c core.fileMode=false diff --cached --no-color --no-ext-diff --no-textconv --binary "$2" > "$3"; '
    'stat -c %s "$3" 2>/dev/null || true'
)
# between two ways of applying the patch, as the package's harness: back to the pristine tree
_RESET = "git checkout -- . ; git clean -fd"
PROMPT = (
    "{problem}\n\n"
    "The repository is checked out in your working directory ({workdir}), at the commit the issue above was "
    "reported against. Change its source files so that the issue is resolved; the repository's own tests are "
    "run on your changes afterwards. Your answer is the state of the repository you leave."
)


@dataclass(slots=True)
class SwebenchConfig(RuntimeBenchmarkConfig):
    path: str = config_field(
        default="",
        description="The instances: a JSONL or JSON file, a Parquet file, a folder of Parquet files "
        "(<split>-*.parquet, as the dataset's repository holds them) or a `datasets` save_to_disk folder, "
        "each row a SWE-bench instance as swebench 5 describes it (instance_id, repo, base_commit, "
        "problem_statement, patch, test_patch, FAIL_TO_PASS, PASS_TO_PASS, version, image, eval_script, "
        "log_parser, eval_type). A relative path resolves against the working directory. Nothing is downloaded.",
        stage="tasks",
    )
    split: str | None = config_field(
        default=None,
        description="The split to read from a save_to_disk folder of several splits, or from a folder of "
        "Parquet files (its <split>-*.parquet or <split>.parquet); null: the only one there (a single file "
        "is its own split).",
        stage="tasks",
    )
    instance_ids: list[str] | None = config_field(
        default=None,
        description="Run only these instances (their instance_id, the task id); an id not in the file is an "
        "error naming it. null: all.",
        stage="tasks",
    )
    image_namespace: str | None = config_field(
        default=None,
        description="Registry prefix of the instance images, in place of the one in each instance's `image` "
        "(e.g. 'registry.example.com/swebench'; '' for none); null: as the instance names it.",
    )
    image_tag: str | None = config_field(
        default=None,
        description="Tag of the instance images, in place of the one in each instance's `image`; null: as the "
        "instance names it (else 'latest').",
    )
    eval_timeout: float = config_field(
        default=1800.0,
        description="Seconds the instance's evaluation script may run (the package's default); a run that "
        "takes longer is graded as the package grades it (its log ends in a timeout line).",
        stage="evaluate",
    )
    max_patch_bytes: int = config_field(
        default=10_000_000,
        description="Largest diff the agent may leave (bytes); a larger one is not applied: unresolved.",
    )
    max_log_bytes: int = config_field(
        default=16_000_000,
        description="Largest test log read back (bytes); the rest is cut off before grading (so a log without "
        "its end marker, unresolved). The log graded is kept in result.json.",
        stage="evaluate",
    )

    def __post_init__(self) -> None:
        RuntimeBenchmarkConfig.__post_init__(self)
        if not isinstance(self.path, str) or not self.path:
            raise ParameterError("path must name the instances file (JSONL, JSON, Parquet) or a save_to_disk "
                                 "folder of a SWE-bench dataset; it is required", ["path"])
        if not Path(self.path).expanduser().exists():
            raise ParameterError(f"path {str(Path(self.path).expanduser().resolve())!r} does not exist (it should be "
                                 "a SWE-bench instances file or save_to_disk folder)", ["path"])
        if self.instance_ids is not None:
            if not isinstance(self.instance_ids, list) or not all(isinstance(i, str) for i in self.instance_ids):
                raise ParameterError(f"instance_ids must be a list of instance ids, got {self.instance_ids!r}",
                                     ["instance_ids"])
        for name in ("image_namespace", "image_tag", "split"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ParameterError(f"{name} must be a string or null, got {value!r}", [name])
        if self.image_tag is not None and (not self.image_tag or any(c in self.image_tag for c in "/:@ ")):
            raise ParameterError(f"image_tag must be a tag such as 'latest', got {self.image_tag!r}", ["image_tag"])
        try:
            self.eval_timeout = float(self.eval_timeout)
        except (TypeError, ValueError):
            raise ConfigError(f"eval_timeout must be a number of seconds, got {self.eval_timeout!r}") from None
        if not 0 < self.eval_timeout < math.inf:
            raise ConfigError(f"eval_timeout must be positive, got {self.eval_timeout}")
        for name in ("max_patch_bytes", "max_log_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive number of bytes, got {value!r}")


@dataclass(slots=True)
class SwebenchPlan(BenchmarkPlan):
    instance_id: str = plan_field("")
    image: str = plan_field("")
    # the command that fetches the image, for the error of an image that is not on the engine
    image_hint: str = plan_field("")
    workdir: str = plan_field(WORKDIR)
    base_commit: str = plan_field("")
    max_patch_bytes: int = plan_field(10_000_000)
    eval_timeout: float = plan_field(1800.0, stage="evaluate")
    max_log_bytes: int = plan_field(16_000_000, stage="evaluate")


# --- the instances -------------------------------------------------------------------------


def read_rows(path: Path, split: str | None) -> list[dict[str, Any]]:
    """The rows of the instances file or folder, in its order."""
    if path.is_dir():
        parquet = sorted(path.glob("*.parquet")) or sorted(path.glob("data/*.parquet"))
        if parquet:
            splits = sorted({p.name.split("-")[0].removesuffix(".parquet") for p in parquet})
            chosen = split if split is not None else (splits[0] if len(splits) == 1 else None)
            if chosen is None or chosen not in splits:
                raise ValueError(f"swebench: {path} holds the splits {splits}; set the benchmark param split to one")
            files = [p for p in parquet if p.name.split("-")[0].removesuffix(".parquet") == chosen]
            return [row for file in files for row in _parquet_rows(file)]
        return _disk_rows(path, split)
    name = path.name.lower()
    if name.endswith(".jsonl"):
        rows = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"swebench: {path} line {number} is not JSON ({exc})") from None
        return rows
    if name.endswith(".json"):
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise ValueError(f"swebench: {path} must hold a JSON list of instances")
        return data
    if name.endswith(".parquet"):
        return _parquet_rows(path)
    raise ValueError(f"swebench: {path} is neither .jsonl, .json nor .parquet, nor a save_to_disk folder")


def _parquet_rows(path: Path) -> list[dict[str, Any]]:
    import pandas

    return [json_value(row) for row in pandas.read_parquet(path).to_dict(orient="records")]


def _disk_rows(path: Path, split: str | None) -> list[dict[str, Any]]:
    if not (path / "dataset_dict.json").is_file() and not (path / "dataset_info.json").is_file():
        raise ValueError(f"swebench: {path} is a folder, but neither a save_to_disk folder of a dataset nor a folder "
                         "of Parquet files")
    import datasets

    data = datasets.load_from_disk(str(path))
    if isinstance(data, datasets.DatasetDict):
        names = sorted(data.keys())
        chosen = split if split is not None else (names[0] if len(names) == 1 else None)
        if chosen is None or chosen not in data:
            raise ValueError(f"swebench: {path} holds the splits {names}; set the benchmark param split to one")
        data = data[chosen]
    return [json_value(dict(row)) for row in data]


def image_name(image: str, namespace: str | None, tag: str | None) -> str:
    """The instance's image with its registry prefix and tag replaced where given."""
    last = image.rsplit("/", 1)[-1]
    repository, old_tag = (image.rsplit(":", 1) if ":" in last else (image, None))
    if namespace is not None:
        short = repository.rsplit("/", 1)[-1]
        repository = f"{namespace.rstrip('/')}/{short}" if namespace.strip("/") else short
    return f"{repository}:{tag or old_tag or 'latest'}"


def test_spec(instance: dict[str, Any]):
    """The package's test spec of an instance (its image, eval script, log parser, eval type)."""
    from swebench.harness.utils import make_test_spec

    return make_test_spec(instance)


def load_instance(row: Any, where: str) -> TaskSpec:
    if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str) or not row["instance_id"]:
        raise ValueError(f"swebench: {where} is not an instance (no instance_id)")
    iid = row["instance_id"]
    missing = [key for key in REQUIRED if row.get(key) is None]
    if missing:
        return TaskSpec(task_id=iid, load_error=f"swebench: instance {iid!r} ({where}) has no {', '.join(missing)}; "
                        "swebench 5 instances carry them (image, eval_script, log_parser, eval_type too)")
    if not isinstance(row["base_commit"], str) or not re.fullmatch(r"[0-9a-f]{7,64}", row["base_commit"]):
        return TaskSpec(task_id=iid, load_error=f"swebench: instance {iid!r} ({where}): base_commit "
                        f"{str(row['base_commit'])[:80]!r} is not a commit id (hexadecimal)")
    from swebench.harness.constants import EvalType
    from swebench.harness.log_parsers import PARSER_REGISTRY

    try:
        spec = test_spec(row)
        EvalType(spec.eval_type)
    except Exception as exc:  # the package's own refusal of the row
        return TaskSpec(task_id=iid, load_error=f"swebench: instance {iid!r} ({where}): the swebench package cannot "
                        f"make its test spec: {type(exc).__name__}: {exc}")
    if spec.log_parser not in PARSER_REGISTRY:
        return TaskSpec(task_id=iid, load_error=f"swebench: instance {iid!r} names the log parser "
                        f"{spec.log_parser!r}, which swebench {PACKAGE_VERSION} does not have")
    return TaskSpec(
        task_id=iid,
        question=str(row["problem_statement"]),
        category=str(row["repo"]),
        ground_truth={key: row[key] for key in GROUND_TRUTH},
        metadata={"swebench": {k: v for k, v in row.items() if k not in GROUND_TRUTH}},
    )


def file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    if path.is_file():
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                sha.update(block)
        return sha.hexdigest()
    for entry, fd in trees.walk(path, most_depth=16):
        if entry.kind == "file":
            sha.update(entry.path + b"\0" + trees.read_bytes(os.path.basename(entry.path), dir_fd=fd) + b"\0")
    return sha.hexdigest()


@dataclass
class GoldPatch(ScriptReference):
    """The instance's gold patch, applied in the oracle's session (``git apply``), then removed."""

    patch: str = ""
    workdir: str = WORKDIR

    async def run(self, session):
        await session.exec(["mkdir", "-p", posixpath.dirname(self.target)])
        await session.write_text(self.target, self.patch)
        try:
            return await session.exec(["sh", "-c", 'cd "$1" && git apply --verbose "$2"', "sh", self.workdir,
                                       self.target], timeout=self.timeout)
        finally:
            await session.exec(["rm", "-f", self.target])


def _measured_size(stdout: str) -> int | None:
    """The diff's size the diff script printed (its last line), or None when that is no whole number."""
    lines = stdout.strip().splitlines()
    last = lines[-1].strip() if lines else ""
    return int(last) if last.isascii() and last.isdigit() and len(last) <= 20 else None


async def _read_bounded(env, remote: str, limit: int) -> tuple[str | None, int]:
    """The text of one file of the session, at most ``limit`` bytes of it, and its size (None: no file).

    The file is copied out whole (within the session's copy limits) into a private folder and read
    from there only if it is a regular file: a link or anything else there is no file.
    """
    with tempfile.TemporaryDirectory(prefix="agentcompass-swebench-") as folder:
        local = Path(folder) / "file"
        try:
            await env.download(remote, local)
        except FileNotFoundError:
            return None, 0
        except OSError as exc:  # beyond the session's copy limits (CopyLimitError), or nothing a file could hold
            limits = getattr(exc, "limits", None)
            return None, limits.size if limits is not None else 0
        try:
            fd = os.open(local, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None, 0
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not (info.st_mode & 0o170000 == 0o100000):
                return None, 0
            data = f.read(limit)
        return data.decode("utf-8", errors="replace"), info.st_size


async def grade(instance: dict[str, Any], prediction: dict[str, Any], log: str, *, statuses: bool = True,
                timeout: float = GRADE_TIMEOUT) -> tuple[dict[str, Any], dict[str, Any]]:
    """The package's report on ``log`` (``get_eval_report`` with the instance's test spec) and, with
    ``statuses``, every test its log parser found by status, computed in a child process that is killed
    past ``timeout`` seconds (``DeadlineError``)."""
    with tempfile.TemporaryDirectory(prefix="agentcompass-swebench-") as folder:
        log_path = Path(folder) / "test_output.txt"
        log_path.write_text(log, encoding="utf-8")
        job = json.dumps({"instance": instance, "prediction": prediction, "log": str(log_path),
                          "statuses": statuses}).encode()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-c", _GRADER, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(job), timeout)
        except asyncio.TimeoutError:
            raise DeadlineError("grading the test log with the swebench package", timeout) from None
        finally:
            if proc.returncode is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(proc.wait(), 5.0)  # reaped: nothing of it stays on the host
    if proc.returncode != 0:
        raise RuntimeError(f"swebench: grading the test log failed (exit status {proc.returncode}): "
                           f"{err.decode(errors='replace')[-_TAIL:].strip()}")
    answer = json.loads(out)
    return answer["report"], answer["statuses"]


async def graded(task_id: str, instance: dict[str, Any], result: RunResult, patch: str | None, log: str,
                 applied: str | None, truncated: bool) -> RunResult:
    """``result`` scored by the package's report of ``log`` (the tests' output) for ``patch``: completed.

    The report's ``infra_failure`` is the package's advice, read from text that the patched tests print
    ("Cannot allocate memory", "Could not resolve host"): it stays in the report, metadata of a completed
    attempt, and never makes the attempt a failure. What the host itself sees go wrong (the container
    died, a command could not run) raises from the session instead, with its class.
    """
    prediction = {"instance_id": task_id, "model_name_or_path": "agentcompass", "model_patch": patch}
    # every test the log parser found, by status (empty when the package found the log unusable)
    report, statuses = await grade(instance, prediction, log, statuses=patch is not None)
    resolved = bool(report.get("resolved"))
    verdict = {
        "report": report,
        "resolved": resolved,
        "test_statuses": statuses,
        "applied_with": applied,
        "log_truncated": truncated,
        "test_output": log,
    }
    return dataclasses.replace(result, status=TaskStatus.COMPLETED, score=1.0 if resolved else 0.0, correct=resolved,
                               metadata={**result.metadata, "swebench": verdict})


# --- the Benchmark ------------------------------------------------------------------------------


@BENCHMARKS.register()
class SwebenchBenchmark(BaseBenchmark[SwebenchPlan]):
    """SWE-bench-format instances in their images, graded by the swebench package."""

    id = "swebench"
    # 2: the package's infra_failure is metadata of a completed attempt; the tests' processes are ended before
    # their log is read
    version = "2"
    config_class = SwebenchConfig
    plan_class = SwebenchPlan
    dependencies = (DEPENDENCY,)

    def load_tasks(self, req: RunRequest) -> list[TaskSpec]:
        config = self.build_config(req)
        path = Path(config.path).expanduser().resolve()
        rows = read_rows(path, config.split)
        tasks, seen = [], set()
        for number, row in enumerate(rows, 1):
            task = load_instance(row, f"{path.name} row {number}")
            if task.task_id in seen:
                raise ValueError(f"swebench: {path} holds instance {task.task_id!r} twice (row {number})")
            seen.add(task.task_id)
            tasks.append(task)
        if config.instance_ids is not None:
            unknown = [i for i in config.instance_ids if i not in seen]
            if unknown:
                raise ValueError(f"swebench: instance_ids {unknown} are not in {path}; its first ids are "
                                 f"{[t.task_id for t in tasks[:5]]}")
            wanted = set(config.instance_ids)
            tasks = [t for t in tasks if t.task_id in wanted]
        return tasks

    def source_fingerprint(self, req: RunRequest) -> str | None:
        config = self.build_config(req)
        return f"{file_digest(Path(config.path).expanduser().resolve())}-{config.split}"

    def resolve_evaluation_environment_mode(self, req: RunRequest) -> str:
        return "fresh"  # the diff is applied to a fresh container of the image, never to the agent's

    def build_plan(self, task: TaskSpec, req: RunRequest, environment: EnvironmentSpec) -> SwebenchPlan:
        config = self.build_config(req)
        if environment.id != "docker":
            raise ValueError(f"swebench: instances run in their Docker images: select environment 'docker' "
                             f"(got {environment.id!r})")
        instance = task.metadata["swebench"]
        image = image_name(str(instance["image"]), config.image_namespace, config.image_tag)
        hint = (f"fetch it with `docker pull {image}`, or build it with the swebench package "
                f"(`python -m swebench.image_builder.prepare_images --task_repo <the dataset's task repo> "
                f"--instance_ids {task.task_id}`), or set the benchmark params image_namespace / image_tag to "
                "where your images are")
        return SwebenchPlan(
            instance_id=task.task_id, image=image, image_hint=hint, base_commit=str(instance["base_commit"]),
            max_patch_bytes=config.max_patch_bytes, eval_timeout=config.eval_timeout,
            max_log_bytes=config.max_log_bytes,
        )

    async def prepare_task(self, task, env, req, plan) -> PreparedTask:
        _ = env, req  # the image holds the repository: nothing to set up, no session opened
        plan = self._require_plan(plan)
        return PreparedTask(
            task_id=task.task_id,
            category=task.category,
            input=TaskInput(prompt=PROMPT.format(problem=task.question, workdir=plan.workdir)),
            output=TaskOutput(answer="Nothing to return: edit the repository in your working directory; the diff "
                              "you leave from its commit is evaluated."),
            metadata={"instance_id": task.task_id, "repo": task.category},
        )

    def evaluation_seconds(self, plan: BenchmarkPlan) -> float:
        return self._require_plan(plan).eval_timeout + GRADE_TIMEOUT

    def reference_solution(self, task: TaskSpec, plan: BenchmarkPlan) -> GoldPatch | None:
        if task.load_error is not None:
            return None
        plan = self._require_plan(plan)
        patch = str(task.ground_truth["patch"])
        return GoldPatch(source="", script="git apply (the gold patch)", target=PATCH_FILE,
                         fingerprint=hashlib.sha256(patch.encode()).hexdigest(), patch=patch, workdir=plan.workdir)

    async def after_run(self, prepared, result, env, req, plan) -> RunResult:
        """The diff the agent left (the answer), taken in its session; the harness's own answer is kept aside."""
        _ = prepared, req
        plan = self._require_plan(plan)
        ran = await env.exec(["sh", "-c", _DIFF, "sh", plan.workdir, plan.base_commit, PATCH_FILE],
                             timeout=DIFF_TIMEOUT)
        patch, size = (None, 0)
        note = None
        measured = _measured_size(ran.stdout)
        if ran.ok and measured is not None and measured > plan.max_patch_bytes:
            size = measured
            note = (f"the diff is {size} bytes in the session, more than max_patch_bytes ({plan.max_patch_bytes}): "
                    "not copied, not applied")
        elif ran.ok:
            # a size the session did not tell (no stat, or one the agent replaced): the copy is bounded by the
            # session's copy limits, and no more than max_patch_bytes + 1 of it is read
            patch, size = await _read_bounded(env, PATCH_FILE, plan.max_patch_bytes + 1)
            if patch is None and size:
                note = f"the diff is more than {size} bytes, more than max_patch_bytes ({plan.max_patch_bytes}): not applied"
            elif patch is None:
                note = "the diff was not a regular file"
            elif size > plan.max_patch_bytes:
                note = f"the diff is {size} bytes, more than max_patch_bytes ({plan.max_patch_bytes}): not applied"
                patch = None
        else:
            note = f"git diff in {plan.workdir} failed (exit status {ran.returncode}): {ran.stderr[-500:].strip()}"
        metadata = {**result.metadata, "harness_answer": result.answer,
                    "model_patch": {"bytes": size, **({"refused": note} if note else {})}}
        return dataclasses.replace(result, answer=patch, metadata=metadata)

    async def evaluate(self, task, prepared, result, env, req, plan) -> RunResult:
        _ = prepared, req
        plan = self._require_plan(plan)
        instance = {**task.metadata["swebench"], **task.ground_truth}
        spec = test_spec(instance)
        patch = result.answer if isinstance(result.answer, str) else None
        if patch is not None and len(patch.encode()) > plan.max_patch_bytes:
            patch = None  # an answer that did not come through after_run (an older output.json)
        log, applied, truncated = "", None, False
        if patch is not None:
            log, applied, truncated = await self._run_tests(env, plan, spec, patch)
        return await graded(task.task_id, instance, result, patch, log, applied, truncated)

    async def _run_tests(self, env, plan: SwebenchPlan, spec, patch: str) -> tuple[str, str | None, bool]:
        """Apply ``patch`` to the fresh repository as the package's harness does, run the eval script; its log."""
        from swebench.harness.constants import APPLY_PATCH_FAIL, APPLY_PATCH_PASS
        from swebench.harness.run_evaluation import GIT_APPLY_CMDS

        made = await env.exec(["mkdir", "-p", posixpath.dirname(PATCH_FILE)])
        if not made.ok:
            raise InfrastructureError(f"swebench: could not make {posixpath.dirname(PATCH_FILE)} in the evaluation "
                                      f"container: {made.stderr.strip()}")
        if not await env.is_dir(plan.workdir):
            raise InfrastructureError(f"swebench: the image {plan.image} has no {plan.workdir} (the repository); "
                                      "it is not a SWE-bench instance image")
        applied = None
        lines = []
        if patch.strip():
            await env.write_text(PATCH_FILE, patch)
            for number, command in enumerate(GIT_APPLY_CMDS):
                if number:
                    await env.exec(["bash", "-c", _RESET], cwd=plan.workdir)
                ran = await env.exec([*shlex.split(command), PATCH_FILE], cwd=plan.workdir)  # as the package runs it
                if ran.ok:
                    applied = command
                    lines.append(f"{APPLY_PATCH_PASS}:\n{ran.stdout}")
                    break
            if applied is None:
                back = await env.exec(["git", "apply", "--check", "--reverse", PATCH_FILE], cwd=plan.workdir)
                if back.ok:
                    applied = "already applied"
                else:
                    return f"{APPLY_PATCH_FAIL}:\n{ran.stdout}{ran.stderr}", None, False
        await env.write_text(EVAL_SCRIPT, spec.eval_script)
        # the tests run the agent's code: when they exit, every process of the container but its init is ended,
        # so nothing they started writes to the log while it is read
        ran = await env.exec_and_end(["sh", "-c", '/bin/bash "$1" > "$2" 2>&1', "sh", EVAL_SCRIPT, EVAL_LOG],
                                     timeout=plan.eval_timeout)
        log, size = await _read_bounded(env, EVAL_LOG, plan.max_log_bytes)
        log = log or ""
        if ran.timed_out:  # as the package's harness marks it
            log += f"\n\nTimeout error: {int(plan.eval_timeout)} seconds exceeded."
        return "".join(lines) + log, applied, size > plan.max_log_bytes
