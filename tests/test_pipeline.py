"""The workflow end to end: real Snakemake, real files, real reruns."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from agentcompass.pipeline.files import FILE_KINDS, generate_schema, schema_path
from conftest import ROOT, agentcompass, jobs_run, snakemake

RUN = Path("results/default/example-oracle")
TASK_IDS = ["capital-france", "capital-japan", "largest-planet", "water-formula", "author-hamlet"]


@pytest.fixture
def evaluated(default_run_copy: Path) -> Path:
    """The default evaluation, built in a fresh directory once a session (conftest.default_run), copied here."""
    return default_run_copy


def mtimes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*.json")}


def test_default_evaluation_scores_oracle_accuracy_one(evaluated: Path):
    metrics = json.loads((evaluated / RUN / "metrics.json").read_text())
    assert metrics["metrics"]["accuracy"] == 1.0
    assert metrics["counts"] == {"completed": 5}
    assert metrics["num_attempts"] == 5
    for task_id in TASK_IDS:
        result = json.loads((evaluated / RUN / "attempts" / task_id / "1" / "result.json").read_text())
        assert result["task_id"] == task_id
        assert result["status"] == "completed" and result["correct"] is True


@pytest.mark.smoke  # a real Snakemake run, and its reuse
def test_second_run_runs_no_job(evaluated: Path):
    before = mtimes(evaluated / "results")
    again = snakemake(evaluated)
    assert again.returncode == 0
    assert jobs_run(again.stderr) == {}
    assert "Nothing to be done" in again.stderr
    assert mtimes(evaluated / "results") == before


def test_deleting_result_reruns_only_that_evaluation_and_metrics(evaluated: Path):
    attempt = evaluated / RUN / "attempts" / "capital-japan" / "1"
    (attempt / "result.json").unlink()
    before = mtimes(evaluated / "results")
    again = snakemake(evaluated)
    assert again.returncode == 0, again.stderr[-3000:]
    assert jobs_run(again.stderr) == {"evaluate": 1, "metrics": 1, "report": 1}
    after = mtimes(evaluated / "results")
    changed = {k for k in after if before.get(k) != after[k]}
    assert changed == {f"{RUN.relative_to('results')}/attempts/capital-japan/1/result.json",
                       f"{RUN.relative_to('results')}/attempts/capital-japan/1/plan.json",
                       f"{RUN.relative_to('results')}/metrics.json"}


def test_deleting_output_reruns_its_run_evaluation_and_metrics(evaluated: Path):
    (evaluated / RUN / "attempts" / "water-formula" / "1" / "output.json").unlink()
    again = snakemake(evaluated)
    assert again.returncode == 0, again.stderr[-3000:]
    assert jobs_run(again.stderr) == {"run": 1, "evaluate": 1, "metrics": 1, "report": 1}
    result = json.loads((evaluated / RUN / "attempts" / "water-formula" / "1" / "result.json").read_text())
    assert result["correct"] is True


def test_a_failed_stage_leaves_its_traceback_in_its_log_and_a_rerun_that_succeeds_removes_it(evaluated: Path):
    attempts = evaluated / RUN / "attempts"
    # every job succeeded: no stage wrote a log, and no empty one was made for it
    assert list(attempts.glob("*/*/*.log")) == [] and list(attempts.glob("*/*/result.json"))
    attempt = attempts / "largest-planet" / "1"
    (attempt / "output.json").write_text("{not json")  # a damaged file the evaluate stage reads
    failed = snakemake(evaluated, "--forcerun", str(RUN / "attempts/largest-planet/1/result.json"))
    assert failed.returncode != 0
    log = (attempt / "evaluate.log").read_text()
    assert log.startswith("evaluate ns=default run_id=example-oracle task=largest-planet attempt=1: failed\n")
    assert "Traceback" in log and "JSONDecodeError" in log
    assert [p.name for p in attempts.glob("*/*/*.log") if p.read_text()] == ["evaluate.log"]

    (attempt / "output.json").unlink()
    again = snakemake(evaluated)
    assert again.returncode == 0, again.stderr[-3000:]
    assert jobs_run(again.stderr) == {"run": 1, "evaluate": 1, "metrics": 1, "report": 1}
    assert list(attempts.glob("*/*/*.log")) == []  # Snakemake removed the failure's log before the rerun


def test_two_fresh_runs_write_byte_identical_tasks_and_plans(workdir: Path):
    dirs = []
    for name in ("one", "two"):
        d = workdir / name
        d.mkdir()
        assert snakemake(d).returncode == 0
        dirs.append(d)
    names = sorted(str(p.relative_to(dirs[0])) for p in dirs[0].rglob("*.json")
                   if p.name in ("tasks.json", "plans.json", "plan.json"))
    assert len(names) == 2 + len(TASK_IDS)
    for name in names:
        assert (dirs[0] / name).read_bytes() == (dirs[1] / name).read_bytes(), name


def test_every_written_json_file_validates_against_its_schema(evaluated: Path):
    files = sorted((evaluated / "results").rglob("*.json"))
    kinds = {}
    for path in files:
        kind = path.stem
        assert kind in FILE_KINDS, f"{path} has no schema"
        schema = json.loads(schema_path(kind).read_text())
        jsonschema.Draft202012Validator(schema).validate(json.loads(path.read_text()))
        kinds[kind] = kinds.get(kind, 0) + 1
    # shard.json exists only in a request built as shards: tests/test_shards.py validates it; preflight/<task>.json
    # only with execution.preflight: tests/test_preflight.py does; scan.json only with scanners:
    # tests/test_scan_stage.py does (through the writer, which validates it)
    assert set(kinds) == set(FILE_KINDS) - {"shard", "preflight", "scan"}
    # canonical: sorted keys, trailing newline
    for path in files:
        text = path.read_text()
        assert text.endswith("\n")
        assert text == json.dumps(json.loads(text), sort_keys=True, ensure_ascii=False, indent=2) + "\n"


def test_schemas_in_repository_match_the_contracts():
    for kind in FILE_KINDS:
        committed = json.loads(schema_path(kind).read_text())
        assert committed == generate_schema(kind), f"run scripts/generate_schemas.py ({kind})"


def test_run_info_holds_the_audit_view_of_every_attempt(evaluated: Path):
    info = json.loads((evaluated / RUN / "run_info.json").read_text())
    assert sorted(info["resolved_execution_plans"]) == sorted(TASK_IDS)
    view = info["resolved_execution_plans"]["capital-france"]["attempts"]["1"]
    assert view == {
        "applied_recipes": [],
        "evaluation_environment": None,
        "evaluation_environment_mode": "task",
        "network": {"baseline": "public", "evaluation": "public", "run": "public"},
        "task_environment": "host_process",
    }


def test_prepared_task_never_holds_the_answer(evaluated: Path):
    for task_id in TASK_IDS:
        prepared = json.loads((evaluated / RUN / "attempts" / task_id / "1" / "prepared.json").read_text())
        plan_answer = json.loads((evaluated / RUN / "attempts" / task_id / "1" / "plan.json").read_text())["benchmark_plan"]["expected"]
        assert prepared["ground_truth"] is None
        assert plan_answer.casefold() not in json.dumps(prepared).casefold()


def test_cli_run_builds_one_request_and_drives_snakemake(workdir: Path):
    done = agentcompass(workdir, "run", "example_exact_match", "oracle", "some-model")
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((workdir / "results/default/example_exact_match-oracle-some-model/metrics.json").read_text())
    assert metrics["metrics"]["accuracy"] == 1.0
    request = json.loads((workdir / "results/default/example_exact_match-oracle-some-model/request.json").read_text())
    assert request["model"]["id"] == "some-model"
    assert request["harness"]["id"] == "oracle"
    # the project config's own request is not part of a single run
    assert not (workdir / RUN).exists()
    assert "accuracy 1.0" in done.stdout


def test_a_wrong_answer_scores_zero_and_is_completed_not_an_error(workdir: Path):
    done = agentcompass(workdir, "run", "example_exact_match", "fixed_answer", "none", "-H", "answer=Paris")
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((workdir / "results/default/example_exact_match-fixed_answer-none/metrics.json").read_text())
    assert metrics["counts"] == {"completed": 5}
    assert metrics["metrics"]["accuracy"] == pytest.approx(0.2)


def test_dry_run_prints_complete_requests_without_loading_tasks(workdir: Path):
    # task_ids that do not exist would fail task loading: a dry run never gets there
    done = agentcompass(workdir, "run", "example_exact_match", "oracle", "none", "-b", "task_ids=[missing]", "--dry-run")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed[0]["request"]["benchmark"]["params"]["task_ids"] == ["missing"]
    assert set(printed[0]["request"]) == {"model", "benchmark", "harness", "environment", "execution", "runtime", "output", "metadata"}
    assert not (workdir / "results").exists()


def test_config_on_the_command_line_selects_tasks_and_attempts(workdir: Path):
    done = snakemake(workdir, "--config", "benchmarks={example_exact_match: {limit: 2}}", "execution={attempts: 2}")
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((workdir / RUN / "metrics.json").read_text())
    assert (metrics["num_tasks"], metrics["num_attempts"]) == (2, 4)
    assert (workdir / RUN / "attempts/capital-japan/2/result.json").exists()


@pytest.mark.e2e  # Snakemake's linter, on the real workflow
def test_snakemake_lint_is_clean():
    done = snakemake(ROOT, "--lint")
    assert done.returncode == 0
    assert "Congratulations, your workflow is in a good condition!" in done.stdout + done.stderr
