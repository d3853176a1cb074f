"""``bfcl``: the Berkeley Function Calling Leaderboard's single-turn Python categories.

Tasks come from the ``bfcl-eval`` package's data (``bfcl_eval/data/BFCL_v4_<category>.json``
and ``possible_answer/``). The harness gets the question and the category's
functions as OpenAI tools; its answer, a list of calls, is checked by BFCL's
AST checker (``bfcl_checker``). Only the data files of ``bfcl-eval`` are read:
install it without its dependencies (``pip install --no-deps bfcl-eval==2026.3.23``).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.metadata
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcompass.benchmarks import bfcl_checker
from agentcompass.benchmarks.config import RuntimeBenchmarkConfig
from agentcompass.runtime import (
    BENCHMARKS,
    BaseBenchmark,
    MetricResult,
    PreparedTask,
    RunRequest,
    RunResult,
    TaskInput,
    TaskOutput,
    TaskSpec,
    TaskStatus,
)
from agentcompass.runtime.config import ConfigError, config_field, parse_bool
from agentcompass.runtime.dependencies import DependencySpec

PACKAGE = "bfcl-eval"
PACKAGE_VERSION = "2026.3.23"
# only its data files are read: its own dependencies (torch, CUDA) are not needed
DEPENDENCY = DependencySpec(
    extra="bfcl", imports=("bfcl_eval",), pip=f"pip install --no-deps '{PACKAGE}=={PACKAGE_VERSION}'",
)

# The categories checked here, in BFCL's order: all are single-turn Python with
# an AST check (the irrelevance ones pass when no function is called).
SUPPORTED = [
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_irrelevance",
]
# The other categories of BFCL v4, and what checking them would take.
UNSUPPORTED = {
    "simple_java": "needs BFCL's Java type converters: its arguments are Java source strings",
    "simple_javascript": "needs BFCL's JavaScript type converters: its arguments are JavaScript source strings",
    "live_relevance": "has no ground truth, so the oracle has no reference",
    "multi_turn_base": "multi-turn: needs BFCL's stateful API backends and a conversation loop",
    "multi_turn_miss_func": "multi-turn: needs BFCL's stateful API backends and a conversation loop",
    "multi_turn_miss_param": "multi-turn: needs BFCL's stateful API backends and a conversation loop",
    "multi_turn_long_context": "multi-turn: needs BFCL's stateful API backends and a conversation loop",
    "web_search": "agentic: needs a web search backend",
    "memory": "agentic: needs BFCL's memory backends",
    "format_sensitivity": "checks prompt-format variants of models that answer in text, not tool calls",
}

# Tasks of the pinned data whose ground truth no call can satisfy under BFCL's own
# checker: every model scores 0 on them. Left out unless include_unsatisfiable.
UNSATISFIABLE = {
    "live_simple_106-63-0": "auto_loan_payment_start and bank_hours_start are required and have no allowed value",
    "live_simple_112-68-0": "five required parameters have no allowed value",
    "live_multiple_507-149-4": "origin_airport is required and may only be left out",
    "live_multiple_862-181-3": "the ground truth sets journey_start_time, which the function does not declare",
    "live_multiple_964-207-0": "the ground truth sets question, which the function does not declare, and not the required statement",
}

# model_handler.utils GORILLA_TO_OPENAPI: BFCL's parameter types as JSON Schema types
GORILLA_TO_OPENAPI = {
    "integer": "integer", "number": "number", "float": "number", "string": "string",
    "boolean": "boolean", "bool": "boolean", "array": "array", "list": "array",
    "dict": "object", "object": "object", "tuple": "array", "any": "string",
    "byte": "integer", "short": "integer", "long": "integer", "double": "number",
    "char": "string", "ArrayList": "array", "Array": "array", "HashMap": "object",
    "Hashtable": "object", "Queue": "array", "Stack": "array", "Any": "string",
    "String": "string", "Bigint": "integer",
}
# utils._get_language_specific_hint for Python categories
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."


@dataclass(slots=True)
class BfclConfig(RuntimeBenchmarkConfig):
    categories: list[str] | None = config_field(
        default=None,
        description=(
            f"BFCL categories to run; null runs every supported one. Supported: {', '.join(SUPPORTED)}. "
            "Not supported (naming one is an error): "
            + "; ".join(f"{name} ({why})" for name, why in UNSUPPORTED.items())
            + "."
        ),
        stage="tasks",
    )

    include_unsatisfiable: bool = config_field(
        default=False,
        description=(
            f"Keep the {len(UNSATISFIABLE)} tasks whose ground truth no call can satisfy under BFCL's checker "
            f"({', '.join(UNSATISFIABLE)}); BFCL's leaderboard keeps them (every model fails them), so true "
            "makes scores compare one to one with it."
        ),
        stage="tasks",
    )

    def __post_init__(self) -> None:
        RuntimeBenchmarkConfig.__post_init__(self)
        self.include_unsatisfiable = parse_bool(self.include_unsatisfiable, "include_unsatisfiable")
        for name in self.categories or []:
            if name in UNSUPPORTED:
                raise ConfigError(f"categories: BFCL category {name!r} is not supported ({UNSUPPORTED[name]}). "
                                  f"Fix: choose among {', '.join(SUPPORTED)}")
            if name not in SUPPORTED:
                raise ConfigError(f"categories: {name!r} is not a BFCL v4 category. Fix: choose among {', '.join(SUPPORTED)}")


def data_dir() -> Path:
    """``bfcl_eval/data`` of the pinned package, found without importing it (its imports are heavy)."""
    fix = f"Fix: {DEPENDENCY.pip} (only its data files are read)"
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"benchmark 'bfcl' reads its tasks from the {PACKAGE} package, which is not installed. {fix}")
    installed = importlib.metadata.version(PACKAGE)
    if installed != PACKAGE_VERSION:
        raise RuntimeError(f"benchmark 'bfcl' is pinned to {PACKAGE} {PACKAGE_VERSION}, but {installed} is installed. {fix}")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def category_of_id(task_id: str) -> str:
    """utils.extract_test_category_from_id: 'live_simple_3-2-0' is in live_simple."""
    return task_id.rsplit("_", 1)[0]


def _read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def load_category(category: str, root: Path) -> list[TaskSpec]:
    entries = _read_jsonl(root / f"BFCL_v4_{category}.json")
    answers = {}
    if "irrelevance" not in category:
        answers = {a["id"]: a["ground_truth"] for a in _read_jsonl(root / "possible_answer" / f"BFCL_v4_{category}.json")}
    tasks = []
    for entry in entries:
        if len(entry["question"]) != 1:
            raise ValueError(f"BFCL entry {entry['id']} has {len(entry['question'])} turns; category {category} should have one")
        if category_of_id(entry["id"]) != category:
            raise ValueError(f"BFCL entry {entry['id']} in BFCL_v4_{category}.json names another category")
        *history, last = entry["question"][0]
        tasks.append(TaskSpec(
            task_id=entry["id"],
            question=last["content"],
            category=category,
            ground_truth=answers.get(entry["id"]),
            metadata={
                "dataset": PACKAGE,
                "dataset_version": PACKAGE_VERSION,
                "functions": entry["function"],
                "messages": history,
            },
        ))
    return tasks


def to_openai_tools(functions: list[dict]) -> list[dict]:
    """BFCL's function docs as OpenAI function tools, as ``convert_to_tool`` makes them for OpenAI models."""
    tools = []
    for function in copy.deepcopy(functions):
        function["name"] = bfcl_checker.tool_name(function["name"])
        function["description"] = function.get("description", "") + PYTHON_HINT
        function["parameters"]["type"] = "object"
        function["parameters"]["properties"] = _cast_to_openai_type(function["parameters"].get("properties", {}))
        tools.append({"type": "function", "function": function})
    return tools


def _cast_to_openai_type(properties: dict) -> dict:
    """model_handler.utils._cast_to_openai_type: types mapped, floats marked, nested schemas too."""
    for value in properties.values():
        var_type = value.get("type")
        if var_type == "float":
            value["format"] = "float"
            value["description"] = value.get("description", "") + " This is a float type value."
        value["type"] = GORILLA_TO_OPENAPI.get(var_type, "string")
        if value["type"] in ("array", "object"):
            if "properties" in value:
                value["properties"] = _cast_to_openai_type(value["properties"])
            elif "items" in value:
                items = value["items"]
                items["type"] = GORILLA_TO_OPENAPI.get(items.get("type"), "string")
                if items["type"] == "array" and "items" in items:
                    items["items"]["type"] = GORILLA_TO_OPENAPI.get(items["items"].get("type"), "string")
                elif items["type"] == "object" and "properties" in items:
                    items["properties"] = _cast_to_openai_type(items["properties"])
    return properties


def reference_calls(functions: list[dict], ground_truth: list[dict] | None) -> list[dict]:
    """The ground-truth calls, each parameter with its first allowed value.

    A first value of "" means the parameter may be left out, and it is, unless
    the function requires it: then the first other allowed value is used. A
    parameter the function does not declare is left out.
    """
    calls = []
    for call in ground_truth or []:
        name, allowed = next(iter(call.items()))
        parameters = bfcl_checker.find_description(functions, name)["parameters"]
        required = set(parameters.get("required", []))
        arguments = {}
        for param, values in allowed.items():
            candidates = [v for v in values if v != ""] if param in required else values
            if param in parameters["properties"] and candidates and candidates[0] != "":
                arguments[param] = _first_value(candidates[0], parameters["properties"][param])
        calls.append({"name": bfcl_checker.tool_name(name), "arguments": arguments})
    return calls


def _first_value(value: Any, schema: dict) -> Any:
    """A dict parameter's possible answer lists each key's allowed values in turn (dict_checker)."""
    if schema.get("type") == "dict" and isinstance(value, dict):
        return _first_of_each(value)
    if schema.get("type") == "array" and schema.get("items", {}).get("type") == "dict" and isinstance(value, list):
        return [_first_of_each(item) if isinstance(item, dict) else item for item in value]
    return value


def _first_of_each(allowed: dict) -> dict:
    return {key: values[0] for key, values in allowed.items() if values and values[0] != ""}


def check(task: TaskSpec, answer: Any) -> dict:
    """BFCL's verdict on ``answer`` for ``task``: ``{"valid", "error", "error_type"}``."""
    functions = task.metadata["functions"]
    calls = bfcl_checker.decode_calls(answer, {f["name"]: bfcl_checker.tool_name(f["name"]) for f in functions})
    if "irrelevance" in (task.category or ""):
        if bfcl_checker.is_empty_output(calls):
            return {"valid": True, "error": []}
        return {"valid": False, "error": ["Valid syntax. Successfully decode AST when it should not."],
                "error_type": "irrelevance_error:decoder_success"}
    if calls is None:
        return {"valid": False, "error": ["The answer is not a list of function calls."],
                "error_type": "ast_decoder:decoder_wrong_output_format"}
    return bfcl_checker.ast_checker(functions, calls, task.ground_truth, task.category or "")


@BENCHMARKS.register()
class BfclBenchmark(BaseBenchmark):
    """BFCL v4 function calling (single-turn Python, AST-checked): accuracy per category and overall."""

    id = "bfcl"
    config_class = BfclConfig
    dependencies = (DEPENDENCY,)

    def load_tasks(self, req: RunRequest) -> list[TaskSpec]:
        config = self.build_config(req)
        root = data_dir()
        wanted = set(config.categories or SUPPORTED)
        return [
            task
            for category in SUPPORTED if category in wanted
            for task in load_category(category, root)
            if config.include_unsatisfiable or task.task_id not in UNSATISFIABLE
        ]

    async def prepare_task(self, task, env, req, plan) -> PreparedTask:
        _ = env, req, plan
        return PreparedTask(
            task_id=task.task_id,
            category=task.category,
            ground_truth=None,
            input=TaskInput(
                prompt=task.question,
                messages=task.metadata["messages"],
                tools=to_openai_tools(task.metadata["functions"]),
            ),
            output=TaskOutput(
                answer=(
                    "Call the functions that answer the request, with their arguments, as tool calls "
                    '(or a JSON list [{"name": ..., "arguments": {...}}]); call none if none fits.'
                )
            ),
            metadata={"dataset_version": task.metadata["dataset_version"]},
        )

    def reference_solution(self, task, plan) -> list[dict]:
        _ = plan
        return reference_calls(task.metadata["functions"], task.ground_truth)

    async def evaluate(self, task, prepared, result, env, req, plan):
        _ = prepared, env, req, plan
        verdict = check(task, result.answer)
        evidence = {"valid": verdict["valid"]}
        if not verdict["valid"]:
            evidence.update(error=verdict["error"], error_type=verdict["error_type"])
        return dataclasses.replace(
            result,
            status=TaskStatus.COMPLETED,
            correct=verdict["valid"],
            score=1.0 if verdict["valid"] else 0.0,
            metadata={**result.metadata, "bfcl": evidence},
        )

    def aggregate_metrics(self, results: list[RunResult], req: RunRequest) -> MetricResult:
        """Accuracy overall (over attempts) and per category (``accuracy/<category>``); errors count as wrong."""
        metric = BaseBenchmark.aggregate_metrics(self, results, req)
        by_category: dict[str, list[bool]] = {}
        for r in results:
            by_category.setdefault(category_of_id(r.task_id), []).append(bool(r.correct))
        for category, outcomes in sorted(by_category.items()):
            metric.metrics[f"accuracy/{category}"] = sum(outcomes) / len(outcomes)
        metric.details["attempts_per_category"] = {c: len(o) for c, o in sorted(by_category.items())}
        return metric
