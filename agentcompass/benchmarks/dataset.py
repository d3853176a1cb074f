"""``dataset``: a Benchmark declared in YAML over a local JSONL, CSV, Parquet or saved Hugging Face dataset.

A field mapping names the columns that hold each task's id, input, target,
category and choices; a prompt template turns a row into what the harness
sees; a scorer (``dataset_scorers``) grades the answer against the target.
The ``model_graded`` scorer asks a judge Model of its own during evaluation:
its calls are ``model_call`` lines of the attempt's trajectory (with
``judge: true``) and its usage is counted under ``judge_*`` keys.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcompass.benchmarks.config import RuntimeBenchmarkConfig
from agentcompass.benchmarks.dataset_scorers import (
    DEFAULT_RUBRIC,
    SCORERS,
    Boundary,
    PatternError,
    Score,
    ScorerError,
    choice_letters,
    compile_pattern,
    grade_request,
    parse_grade,
    parse_number,
    score_answer,
    to_letter,
)
from agentcompass.benchmarks.task_dir import tree_digest
from agentcompass._util.display import visible
from agentcompass._util.jsonio import not_unicode
from agentcompass.runtime import (
    BENCHMARKS,
    BaseBenchmark,
    BenchmarkPlan,
    PreparedTask,
    RunRequest,
    TaskInput,
    TaskOutput,
    TaskSpec,
    TaskStatus,
)
from agentcompass.runtime.config import ConfigError, ParameterError, config_field, parse_bool, plan_field
from agentcompass.runtime.config.loader import unsupported_param
from agentcompass.runtime.failures import endpoint_failure
from agentcompass.runtime.model_client import (
    ATTEMPT_TRAJECTORY,
    ModelCallConfig,
    ModelCallError,
    ModelClient,
    parse_reply,
)
from agentcompass.runtime.models import ModelSpec
from agentcompass.runtime.models.codec import ContractError, from_dict

FORMATS = ("auto", "jsonl", "csv", "parquet", "hf_disk")
MAPPED = ("id", "input", "target", "category", "choices")
# what a template may name besides the row's own columns
TEMPLATE_NAMES = ("input", "choices", "id", "category")


@dataclass(slots=True)
class DatasetConfig(RuntimeBenchmarkConfig):
    path: str | None = config_field(
        default=None,
        description="Required. The data: a .jsonl, .csv or .parquet file, or a folder written by a Hugging Face dataset's "
        "save_to_disk (needs `pip install datasets`). A relative path resolves against the working directory.",
        stage="tasks",
    )
    format: str = config_field(
        default="auto", choices=list(FORMATS),
        description="How to read `path`; auto: by its extension (.jsonl, .csv, .parquet), a folder as hf_disk.",
        stage="tasks",
    )
    split: str | None = config_field(
        default=None,
        description="hf_disk only: the split to read when the folder holds several (a DatasetDict).",
        stage="tasks",
    )
    fields: dict[str, Any] = config_field(
        default={"input": "input", "target": "target"},
        description="Which column holds what: input (the question, required), target (the reference answer, "
        "required; a list is several accepted answers), id (else row-1, row-2, ...), category, choices (one "
        "column holding a list, or a list of columns, shown lettered A, B, C, ...).",
        stage="tasks",
    )
    prompt_template: str = config_field(
        default="{input}",
        description="What the harness is asked: {input}, {choices} (the lettered options, one a line), {id}, "
        "{category} and any column of the row as {column}; write {{ and }} for literal braces.",
        stage="prepare",
    )
    answer_format: str = config_field(
        default="",
        description="How the answer should be given, sent with the prompt; empty: a sentence that suits the scorer.",
        stage="prepare",
    )
    scorer: str = config_field(
        default="exact", choices=list(SCORERS),
        description="exact (equal text), includes (the target appears in the answer), regex (the target is a "
        "pattern the whole answer must match, within 2 s a match, else an eval_error), numeric (the answer holds "
        "exactly one number, within tolerance of the target), choice (exactly one option letter, the target's), "
        "f1 (token F1 of words, of the worst alternative when the answer offers several, at least "
        "f1_threshold), model_graded (a judge Model grades the answer by the rubric).",
        stage="evaluate",
    )
    case_sensitive: bool = config_field(
        default=False, description="exact, includes and regex: compare with case sensitivity.", stage="evaluate",
    )
    tolerance: float = config_field(
        default=0.0, description="numeric: the largest absolute difference from the target that still passes.",
        stage="evaluate",
    )
    f1_threshold: float = config_field(
        default=0.5, description="f1: the token F1 (0 to 1) at which an answer counts as correct; the score is "
        "the F1 itself.", stage="evaluate",
    )
    judge: dict[str, Any] | None = config_field(
        default=None,
        description="model_graded: the judge Model, written like `model` (id, base_url, api_key as ${VAR}, params, "
        "headers). Its calls take its own endpoint's resource and are lines of the attempt's trajectory.",
        stage="evaluate",
    )
    rubric: str = config_field(
        default=DEFAULT_RUBRIC,
        description="model_graded: the instructions to the judge, with {input}, {target} and {answer}; {answer} "
        "stands between two boundary lines holding a random code drawn for each call, which the judge is told "
        "about first. The judge is always told to end with 'GRADE: C' (correct) or 'GRADE: I' (incorrect): its "
        "last such line outside the answer is the verdict, and a reply without one is an eval_error.",
        stage="evaluate",
    )
    judge_timeout: float = config_field(
        default=60.0, description="model_graded: seconds to wait for one judge reply.", stage="evaluate",
    )

    def __post_init__(self) -> None:
        RuntimeBenchmarkConfig.__post_init__(self)
        if not self.path:
            raise ParameterError("path is required: the .jsonl, .csv or .parquet file (or saved dataset folder) "
                                 "holding the tasks", ["path"])
        self.case_sensitive = parse_bool(self.case_sensitive, "case_sensitive")
        for name in ("tolerance", "f1_threshold", "judge_timeout"):
            setattr(self, name, _number(getattr(self, name), name))
        if not 0 <= self.f1_threshold <= 1:
            raise ParameterError(f"f1_threshold must be between 0 and 1, got {self.f1_threshold}", ["f1_threshold"])
        if self.judge_timeout <= 0:
            raise ParameterError(f"judge_timeout must be more than 0 seconds, got {self.judge_timeout}", ["judge_timeout"])
        self._check_fields()
        _template_names(self.prompt_template, "prompt_template")
        if self.scorer == "model_graded":
            if self.judge is None:
                raise ParameterError("scorer model_graded needs a judge: judge: {id: ..., base_url: ...}", ["judge"])
            judge_model(self.judge)
            for name in _template_names(self.rubric, "rubric"):
                if name not in ("input", "target", "answer"):
                    raise ParameterError(f"rubric names {{{name}}}; it may name {{input}}, {{target}} and {{answer}}",
                                         ["rubric"])
        dataset_tasks(self)  # the file, its columns and every row are checked before any job runs

    def _check_fields(self) -> None:
        unknown = sorted(set(self.fields) - set(MAPPED))
        if unknown:
            raise ParameterError(f"fields: unknown key(s) {unknown}; known: {list(MAPPED)}", ["fields"])
        for key in ("input", "target"):
            if not self.fields.get(key):
                raise ParameterError(f"fields.{key} is required: the column holding each task's {key}", ["fields"])
        for key, value in self.fields.items():
            ok = isinstance(value, str) or (key == "choices" and isinstance(value, list)
                                             and all(isinstance(v, str) for v in value) and value)
            if not ok:
                raise ParameterError(f"fields.{key} must be a column name"
                                     + (" or a list of column names" if key == "choices" else "")
                                     + f", got {value!r}", ["fields"])


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool):
        raise ParameterError(f"{name} must be a number, got {value!r}", [name])
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a number, got {value!r}", [name]) from None
    if number != number or number < 0 or number == float("inf"):
        raise ParameterError(f"{name} must be a finite number >= 0, got {value!r}", [name])
    return number


def _template_names(template: str, name: str) -> list[str]:
    try:
        return [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    except ValueError as exc:
        raise ParameterError(f"{name} is not a valid template ({exc}); write {{{{ and }}}} for literal braces",
                             [name]) from None


def judge_model(spec: dict[str, Any]) -> ModelSpec:
    """The judge's ModelSpec from the ``judge`` param; a clear error for anything it cannot be."""
    try:
        model = from_dict(ModelSpec, spec, "judge")
    except (ContractError, TypeError, ValueError) as exc:
        raise ParameterError(f"judge: {exc}", ["judge"]) from None
    if model.is_none or not model.base_url:
        raise ParameterError("judge needs an id and a base_url (an OpenAI-compatible endpoint)", ["judge"])
    for key, value in model.params.items():
        why = unsupported_param(str(key), value)
        if why:
            raise ParameterError(f"judge.params.{key} cannot be honoured: {why}", ["judge"])
    return model


# --- reading the file ---------------------------------------------------------------


def read_rows(path: Path, fmt: str, split: str | None) -> list[dict[str, Any]]:
    """The rows of the data file, each a mapping of column to value."""
    if not path.exists():
        raise ConfigError(f"dataset: path {str(path)!r} does not exist; point `path` at a .jsonl, .csv or .parquet "
                          "file or a saved dataset folder")
    if fmt == "auto":
        fmt = "hf_disk" if path.is_dir() else {".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}.get(
            path.suffix.lower(), "")
        if not fmt:
            raise ConfigError(f"dataset: cannot tell the format of {path.name!r} from its extension; "
                              f"set format to one of {list(FORMATS[1:])}")
    if fmt == "jsonl":
        return _jsonl(path)
    if fmt == "csv":
        import csv
        return [dict(row) for row in csv.DictReader(io.StringIO(_utf8(path), newline=""))]
    if fmt == "parquet":
        return _parquet(path)
    return _hf_disk(path, split)


def _utf8(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ConfigError(f"dataset: {path}:{line} is not UTF-8 text (byte {data[exc.start]:#04x}); save the file "
                          "as UTF-8") from None


def _jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(_utf8(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"dataset: {path}:{number} is not valid JSON ({exc.msg}); fix that line") from None
        if not isinstance(row, dict):
            raise ConfigError(f"dataset: {path}:{number} is not a JSON object; each line must be one row {{...}}")
        bad = not_unicode(row)
        if bad is not None:
            raise ConfigError(f"dataset: {path}:{number}: the field {visible('.'.join(map(str, bad)))!r} holds a lone "
                              "surrogate escape (\\ud800 to \\udfff), which stands for no character; write the "
                              "character itself (or its pair of escapes)")
        rows.append(row)
    return rows


def _parquet(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError("dataset: reading .parquet needs pyarrow: pip install 'agentcompass[parquet]'") from None
    return [json_value(row) for row in pq.read_table(path).to_pylist()]


def _hf_disk(path: Path, split: str | None) -> list[dict[str, Any]]:
    try:
        import datasets
    except ImportError:
        raise ConfigError(f"dataset: {path} is a saved Hugging Face dataset, which needs the datasets package: "
                          "pip install datasets") from None
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        if split is None or split not in loaded:
            raise ConfigError(f"dataset: {path} holds the splits {sorted(loaded)}; set split to one of them")
        loaded = loaded[split]
    return [json_value(dict(row)) for row in loaded]


def json_value(value: Any) -> Any:
    """A row as JSON data (numpy arrays and scalars of Parquet become lists and numbers)."""
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if hasattr(value, "tolist"):
        return json_value(value.tolist())
    return value


def dataset_tasks(config: DatasetConfig) -> tuple[TaskSpec, ...]:
    """The tasks of the configured file; an error names the file, the row or the field and its columns."""
    assert config.path is not None  # required: checked when the config is built
    path = Path(config.path).expanduser().resolve()
    try:
        stat = path.stat()
    except OSError:
        raise ParameterError(f"path {str(path)!r} does not exist; point it at a .jsonl, .csv or .parquet file "
                             "or a saved dataset folder", ["path"]) from None
    try:
        return _load(str(path), config.format, config.split, json.dumps(config.fields, sort_keys=True),
                     config.prompt_template, config.scorer, stat.st_mtime_ns, stat.st_size)
    except OSError as exc:
        raise ParameterError(f"path {str(path)!r} cannot be read as a dataset: {exc}", ["path"]) from None


@functools.lru_cache(maxsize=8)  # every stage builds the config again, once per task: read the file once
def _load(path_text: str, fmt: str, split: str | None, fields: str, template: str, scorer: str,
          mtime_ns: int, size: int) -> tuple[TaskSpec, ...]:
    _ = mtime_ns, size  # part of the key: an edited file is read again
    path, mapping = Path(path_text), json.loads(fields)
    rows = read_rows(path, fmt, split)
    if not rows:
        raise ConfigError(f"dataset: {path} holds no rows")
    columns = list(dict.fromkeys(c for row in rows for c in row))
    for key, value in mapping.items():
        for column in value if isinstance(value, list) else [value]:
            if column not in columns:
                raise ParameterError(f"fields.{key}: {path.name} has no column {column!r}; its columns are "
                                     f"{columns}", ["fields"])
    for name in _template_names(template, "prompt_template"):
        if name not in columns and name not in TEMPLATE_NAMES:
            raise ParameterError(f"prompt_template names {{{name}}}, which is no column of {path.name} "
                                 f"(columns: {columns}) nor one of {list(TEMPLATE_NAMES)}", ["prompt_template"])
    tasks: list[TaskSpec] = []
    seen: set[str] = set()
    for number, row in enumerate(rows, 1):
        tasks.append(_task(row, number, mapping, scorer, path))
        if tasks[-1].task_id in seen:
            raise ConfigError(f"dataset: row {number} of {path.name} repeats the id {tasks[-1].task_id!r}; "
                              f"ids (fields.id = {mapping.get('id')!r}) must be unique")
        seen.add(tasks[-1].task_id)
    return tuple(tasks)


def _task(row: dict[str, Any], number: int, mapping: dict[str, Any], scorer: str, path: Path) -> TaskSpec:
    where = f"dataset: row {number} of {path.name}"
    question = row.get(mapping["input"])
    if question is None or _text(question).strip() == "":
        raise ConfigError(f"{where}: its input ({mapping['input']!r}) is empty")
    raw_target = row.get(mapping["target"])
    given = raw_target if isinstance(raw_target, list) else [raw_target]
    targets = [_text(t) for t in given if t is not None and _text(t).strip() != ""]
    if not targets:
        raise ConfigError(f"{where}: its target ({mapping['target']!r}) is empty")
    choices_field = mapping.get("choices")
    choices: list[str] = []
    if isinstance(choices_field, list):
        choices = [_text(row.get(c)) for c in choices_field]
    elif choices_field:
        cell = row.get(choices_field)
        if isinstance(cell, str):  # a CSV cell: a JSON list
            try:
                cell = json.loads(cell)
            except json.JSONDecodeError:
                cell = None
        if not isinstance(cell, list) or not cell:
            raise ConfigError(f"{where}: choices ({choices_field!r}) must be a non-empty list, such as "
                              f"[\"red\", \"blue\"] (a JSON list in a CSV cell), got {row.get(choices_field)!r}")
        choices = [_text(c) for c in cell]
    try:
        _check_target(scorer, targets, choices)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if scorer == "choice":
        targets = [to_letter(t, choices) for t in targets]
    raw_id = row.get(mapping["id"]) if mapping.get("id") else f"row-{number}"
    task_id = "" if raw_id is None else _text(raw_id).strip()
    if not task_id:
        raise ConfigError(f"{where}: its id ({mapping['id']!r}) is empty")
    category = row.get(mapping["category"]) if mapping.get("category") else None
    return TaskSpec(
        task_id=task_id, question=_text(question),
        category=None if category is None else _text(category), ground_truth=targets,
        metadata={"choices": choices, "row": {str(k): _text(v) for k, v in row.items() if v is not None}},
    )


# --- the Benchmark ----------------------------------------------------------------


@dataclass(slots=True)
class DatasetPlan(BenchmarkPlan):
    prompt: str = plan_field("", stage="prepare")
    answer_format: str = plan_field("", stage="prepare")
    targets: list[str] = plan_field([], stage="evaluate")
    choices: list[str] = plan_field([], stage="evaluate")
    scorer: str = plan_field("exact", stage="evaluate")
    case_sensitive: bool = plan_field(False, stage="evaluate")
    tolerance: float = plan_field(0.0, stage="evaluate")
    f1_threshold: float = plan_field(0.5, stage="evaluate")
    judge: dict[str, Any] | None = plan_field(None, stage="evaluate")
    rubric: str = plan_field("", stage="evaluate")
    judge_timeout: float = plan_field(60.0, stage="evaluate")


ANSWER_FORMS = {
    "choice": "Answer with the letter of one option only.",
    "numeric": "Give the final answer as a single number.",
    "regex": "Return only the answer, nothing else.",
    "exact": "Return only the answer, nothing else.",
}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@BENCHMARKS.register()
class DatasetBenchmark(BaseBenchmark[DatasetPlan]):
    """Tasks from a local JSONL, CSV, Parquet or saved dataset, mapped, templated and scored as declared in YAML."""

    id = "dataset"
    config_class = DatasetConfig
    plan_class = DatasetPlan

    def source_fingerprint(self, req: RunRequest) -> str | None:
        return tree_digest(Path(self.build_config(req).path).expanduser().resolve())

    def load_tasks(self, req: RunRequest) -> list[TaskSpec]:
        return list(dataset_tasks(self.build_config(req)))

    def build_plan(self, task, req, environment) -> DatasetPlan:
        _ = environment
        config = self.build_config(req)
        choices = list(task.metadata.get("choices") or [])
        letters = choice_letters(len(choices))
        values = {**task.metadata.get("row", {}), "input": task.question, "id": task.task_id,
                  "category": task.category or "",
                  "choices": "\n".join(f"{letter}. {text}" for letter, text in zip(letters, choices))}
        return DatasetPlan(
            prompt=config.prompt_template.format_map(values),
            answer_format=config.answer_format or ANSWER_FORMS.get(config.scorer, "Return only the answer."),
            targets=list(task.ground_truth), choices=choices, scorer=config.scorer,
            case_sensitive=config.case_sensitive, tolerance=config.tolerance, f1_threshold=config.f1_threshold,
            judge=config.judge if config.scorer == "model_graded" else None,
            rubric=config.rubric if config.scorer == "model_graded" else "",
            judge_timeout=config.judge_timeout,
        )

    def evaluation_models(self, req: RunRequest) -> list[ModelSpec]:
        config = self.build_config(req)
        return [judge_model(config.judge)] if config.scorer == "model_graded" else []

    async def prepare_task(self, task, env, req, plan) -> PreparedTask:
        _ = env, req
        plan = self._require_plan(plan)
        return PreparedTask(task_id=task.task_id, category=task.category, input=TaskInput(prompt=plan.prompt),
                            output=TaskOutput(answer=plan.answer_format))

    def reference_solution(self, task, plan) -> str:
        return self._require_plan(plan).targets[0]

    async def evaluate(self, task, prepared, result, env, req, plan):
        _ = env, req
        plan = self._require_plan(plan)
        answer = result.answer if isinstance(result.answer, str) else None  # text only
        if plan.scorer == "model_graded":
            return await self._judge(task, prepared, result, answer, plan)
        try:
            score = score_answer(plan.scorer, answer, plan.targets, choices=plan.choices,
                                 case_sensitive=plan.case_sensitive, tolerance=plan.tolerance,
                                 f1_threshold=plan.f1_threshold)
        except ScorerError as exc:  # e.g. a regex match stopped at its time limit: ungraded, not wrong
            return dataclasses.replace(result, status=TaskStatus.EVAL_ERROR, error=str(exc), error_stage="evaluate",
                                       correct=None, score=None)
        return _scored(result, score, plan)

    async def _judge(self, task, prepared, result, answer, plan: DatasetPlan):
        _ = prepared
        if answer is None or not answer.strip():
            return _scored(result, Score(False, 0.0, "no text answer to grade"), plan)
        model = judge_model(plan.judge or {})
        path = ATTEMPT_TRAJECTORY.get()
        if path is not None:
            drop_judge_lines(Path(path))  # a re-evaluation replaces the judge's lines, never adds to them
        target = " | ".join(plan.targets)
        boundary = Boundary.around(answer, plan.rubric, task.question, target)  # a nonce for this call alone
        messages = grade_request(plan.rubric, task.question, plan.targets, answer, boundary)
        usage: dict[str, Any] = {}
        try:
            async with ModelClient(model, ModelCallConfig(timeout=plan.judge_timeout)) as client:
                try:
                    reply = parse_reply(await client.send(client.request_body(messages), judge=True,
                                                          stage="evaluate"))
                finally:
                    usage = {f"judge_{k}": v for k, v in client.usage.as_dict().items()}
        except ModelCallError as exc:
            failure = endpoint_failure(exc)  # the judge's endpoint: no verdict, and not the verifier's fault
            return dataclasses.replace(result, status=TaskStatus.EVAL_ERROR, error=f"judge: {exc}",
                                       error_stage="evaluate", correct=None, score=None,
                                       usage={**result.usage, **usage}, failure_class=failure["failure_class"],
                                       metadata={**result.metadata, **failure["metadata"]})
        grade = parse_grade(reply.text, boundary)
        result = dataclasses.replace(result, usage={**result.usage, **usage},
                                     metadata={**result.metadata, "judge_reply": reply.text})
        if grade is None:
            return dataclasses.replace(
                result, status=TaskStatus.EVAL_ERROR, correct=None, score=None, error_stage="evaluate",
                error="judge: the reply gives no verdict (its last GRADE line outside the answer is neither "
                      "'GRADE: C' nor 'GRADE: I', or it has none), so the answer is ungraded",
            )
        return _scored(result, Score(grade, float(grade), f"judge: GRADE: {'C' if grade else 'I'}"), plan)


def _scored(result, score: Score, plan: DatasetPlan):
    return dataclasses.replace(
        result, status=TaskStatus.COMPLETED, correct=score.correct, score=score.value,
        ground_truth=plan.targets[0] if len(plan.targets) == 1 else list(plan.targets),
        metadata={**result.metadata, "scorer": plan.scorer, "explanation": score.explanation},
    )


def _check_target(scorer: str, targets: list[str], choices: list[str]) -> None:
    """Raise ValueError when a scorer could never pass this target (checked when the tasks load)."""
    if scorer == "numeric":
        for target in targets:
            if parse_number(target) is None:
                raise ValueError(f"its target {target!r} is not a single number, as scorer numeric needs")
    elif scorer == "regex":
        for target in targets:
            try:
                compile_pattern(target)
            except PatternError as exc:
                raise ValueError(f"its target {target!r} is not a valid regular expression ({exc})") from None
    elif scorer == "choice":
        letters = choice_letters(len(choices)) if choices else choice_letters(26)
        for target in targets:
            if target.strip() not in letters and target not in choices:
                raise ValueError(f"its target {target!r} is neither an option letter ({letters[0]}-{letters[-1]}) "
                                 "nor the text of one of its choices")


def drop_judge_lines(path: Path) -> None:
    """Remove the judge's lines of an earlier evaluation from the trajectory at ``path``."""
    if not path.exists():
        return
    kept = [line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
            if not (line.strip() and json.loads(line).get("judge") is True)]
    path.write_text("".join(kept), encoding="utf-8")
