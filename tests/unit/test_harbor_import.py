"""A Harbor job folder read as a run (agentcompass.imports.harbor): the fixture written through Harbor's own models
(scripts/make_harbor_job.py) read as attempts in the project's terms, and hostile folders refused with an error
naming the file, never a traceback, never anything written."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from agentcompass.imports import ImportError_, harbor
from agentcompass.imports.harbor import MOST_FILE_BYTES, failure_class_of, is_job, read_job, score_of

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "harbor_job"
TRIAL = "capital-japan__i7j8k9l"


def snapshot(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry below ``folder`` with its size, modification time and mode (never through a link)."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            info = os.lstat(os.path.join(root, name))
            found[os.path.relpath(os.path.join(root, name), folder)] = (info.st_size, info.st_mtime_ns, info.st_mode)
    return found


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A copy of the fixture to spoil."""
    copy = tmp_path / "harbor_job"
    shutil.copytree(FIXTURE, copy)
    return copy


def test_the_fixture_reads_as_a_run_of_attempts_in_the_projects_terms():
    before = snapshot(FIXTURE)
    assert is_job(FIXTURE)
    run = read_job(FIXTURE)
    assert snapshot(FIXTURE) == before  # nothing written, nothing touched
    assert (run.source, run.run_id, run.benchmark, run.harness, run.model) == (
        "harbor", "harbor_job", "example_exact_match", "terminus-2", "openai/gpt-4o-mini")
    assert run.details["n_total_trials"] == 6 and run.details["unfinished_trials"] == 0
    found = {(a.task_id, a.attempt): a for a in run.attempts}
    assert sorted(found) == [("author-hamlet", 1), ("capital-france", 1), ("capital-france", 2),
                             ("capital-japan", 1), ("largest-planet", 1), ("water-formula", 1)]

    # the trials of a task numbered in the order they started: the reward-1 trial started first
    first, second = found["capital-france", 1], found["capital-france", 2]
    assert (first.status, first.score, first.correct) == ("completed", 1.0, True)
    assert (second.status, second.score, second.correct) == ("completed", 0.0, False)
    assert first.failure_class is None and first.error is None
    assert first.usage == {"prompt_tokens": 812, "completion_tokens": 9, "cost_usd": 0.000127}
    assert first.timings == {"run_seconds": 4.0, "evaluate_seconds": 2.0}

    # rewards without a "reward" key: their mean, correct only at 1
    hamlet = found["author-hamlet", 1]
    assert (hamlet.status, hamlet.score, hamlet.correct) == ("completed", 0.75, False)

    # an agent timeout: a run error of the limit class; Harbor's reward is kept as the score, the attempt fails
    timeout = found["largest-planet", 1]
    assert (timeout.status, timeout.failure_class, timeout.error_stage) == ("run_error", "limit", "run")
    assert timeout.error.startswith("AgentTimeoutError: ") and timeout.correct is False and timeout.score == 0.0
    assert timeout.usage["prompt_tokens"] == 15230 and timeout.timings["run_seconds"] == 600.0

    # an environment that did not start: infrastructure, no agent run, no reward, no usage
    down = found["water-formula", 1]
    assert (down.status, down.failure_class, down.score, down.usage) == ("run_error", "infrastructure", None, {})
    assert down.error.startswith("EnvironmentStartTimeoutError: ")


def test_a_job_named_through_a_link_is_read(tmp_path: Path):
    (tmp_path / "latest").symlink_to(FIXTURE)
    assert is_job(tmp_path / "latest") and len(read_job(tmp_path / "latest").attempts) == 6


def test_a_trial_folder_and_other_folders_are_not_jobs(tmp_path: Path):
    assert not is_job(FIXTURE / TRIAL)
    assert not is_job(FIXTURE.parent) and not is_job(tmp_path / "missing") and not is_job(FIXTURE / "result.json")
    (tmp_path / "run").mkdir()
    for name in ("config.json", "result.json", "request.json"):
        (tmp_path / "run" / name).write_text("{}")
    assert not is_job(tmp_path / "run")  # an agentcompass run's folder


@pytest.mark.parametrize(("exception_type", "expected"), [
    ("EnvironmentStartTimeoutError", "infrastructure"), ("DockerComposeError", "infrastructure"),
    ("CancelledError", "infrastructure"), ("AgentTimeoutError", "limit"), ("ContextWindowExceededError", "limit"),
    ("VerifierTimeoutError", "verifier"), ("RewardFileNotFoundError", "verifier"), ("ApiRateLimitError", "endpoint"),
    ("AuthenticationError", "endpoint"), ("NonZeroAgentExitCodeError", "harness"), ("KeyError", "harness"),
])
def test_exception_types_map_to_failure_classes(exception_type: str, expected: str):
    assert failure_class_of(exception_type).value == expected


def test_score_is_the_reward_key_else_the_mean():
    assert score_of({"reward": 0.5, "other": 1.0}) == 0.5
    assert score_of({"a": 1.0, "b": 0.0}) == 0.5
    assert score_of({}) is None and score_of(None) is None


def test_a_verifier_error_is_an_eval_error_and_no_reward_a_verifier_failure(job: Path):
    result_file = job / TRIAL / "result.json"
    data = json.loads(result_file.read_text())
    data["exception_info"] = {"exception_type": "VerifierTimeoutError", "exception_message": "late\n\x1b[31m",
                              "exception_traceback": "", "occurred_at": "2026-03-23T12:05:00Z"}
    result_file.write_text(json.dumps(data))
    found = {(a.task_id, a.attempt): a for a in read_job(job).attempts}
    late = found["capital-japan", 1]
    assert (late.status, late.failure_class, late.error_stage) == ("eval_error", "verifier", "evaluate")
    assert late.error == "VerifierTimeoutError: late\\n\\x1b[31m"  # escaped: no terminal sequence gets through

    data["exception_info"] = None
    data["verifier_result"] = None
    result_file.write_text(json.dumps(data))
    silent = {(a.task_id, a.attempt): a for a in read_job(job).attempts}["capital-japan", 1]
    assert (silent.status, silent.failure_class, silent.score) == ("eval_error", "verifier", None)


def test_an_unfinished_trial_is_counted_not_read(job: Path):
    (job / TRIAL / "result.json").unlink()
    run = read_job(job)
    assert len(run.attempts) == 5 and run.details["unfinished_trials"] == 1


def refused(job: Path, *names: str) -> str:
    """read_job's ImportError_ message, which must name the file."""
    with pytest.raises(ImportError_) as caught:
        read_job(job)
    message = str(caught.value)
    assert "/".join([str(job), *names]) in message, message
    assert "Fix:" in message
    return message


def test_a_trial_folder_that_is_a_link_out_is_refused(job: Path, tmp_path: Path):
    outside = tmp_path / "outside"
    shutil.copytree(job / TRIAL, outside)
    shutil.rmtree(job / TRIAL)
    (job / TRIAL).symlink_to(outside)
    assert "symbolic link" in refused(job, TRIAL)


def test_a_result_json_that_is_a_link_is_refused(job: Path, tmp_path: Path):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"task_name": "leaked"}))
    (job / TRIAL / "result.json").unlink()
    (job / TRIAL / "result.json").symlink_to(secret)
    assert "symbolic link" in refused(job, TRIAL, "result.json")
    # a link for the job's own file is refused the same way (opened without following it)
    (job / "result.json").unlink()
    (job / "result.json").symlink_to(secret)
    assert "not a regular file" in refused(job, "result.json")


def test_a_fifo_in_place_of_result_json_is_refused_without_blocking(job: Path):
    (job / TRIAL / "result.json").unlink()
    os.mkfifo(job / TRIAL / "result.json")
    assert "not a regular file" in refused(job, TRIAL, "result.json")


def test_a_huge_result_json_is_refused_unread(job: Path):
    with open(job / TRIAL / "result.json", "r+b") as handle:  # sparse: no disk spent
        handle.truncate(MOST_FILE_BYTES + 1)
    assert f"more than the {MOST_FILE_BYTES} read" in refused(job, TRIAL, "result.json")


def test_a_truncated_result_json_is_refused(job: Path):
    path = job / TRIAL / "result.json"
    path.write_bytes(path.read_bytes()[:300])
    assert "not valid JSON" in refused(job, TRIAL, "result.json")


@pytest.mark.parametrize("content", [b"\xff\xfe not utf-8", b"[" * 100_000 + b"]" * 100_000, b"1" * 5000,
                                     b'["a list"]', b'{"task_name": "t", "trial_name": "n", "verifier_result": '
                                                    b'{"rewards": {"reward": NaN}}}'])
def test_malformed_content_is_refused(job: Path, content: bytes):
    (job / TRIAL / "result.json").write_bytes(content)
    message = refused(job, TRIAL, "result.json")
    # the message quotes none of the content at length, and nothing of it unescaped
    assert len(message) < 1000 and "\xff" not in message and "1" * 500 not in message, message


@pytest.mark.parametrize(("field", "value"), [
    ("task_name", 3), ("task_name", "x" * 1000), ("task_name", "a\nb"), ("verifier_result", {"rewards": {"r": "1"}}),
    ("agent_result", {"n_input_tokens": "many"}), ("started_at", "yesterday"), ("agent_info", ["terminus"]),
    ("source", "data\x1b[2Jset"), ("exception_info", {"exception_type": "E" * 300}),
])
def test_fields_not_as_harbor_writes_them_are_refused(job: Path, field: str, value):
    path = job / TRIAL / "result.json"
    data = json.loads(path.read_text())
    data[field] = value
    path.write_text(json.dumps(data))
    message = refused(job, TRIAL, "result.json")
    # it names the field, and quotes the value bounded and escaped (never a terminal escape or a line break)
    assert field in message and len(message) < 1000 and "\x1b" not in message and "a\nb" not in message, message


def test_a_trial_folder_with_a_name_that_is_not_utf8_is_refused(job: Path):
    os.rename(job / TRIAL, os.path.join(os.fsencode(job), b"bad-\xff-name"))
    message = refused(job)
    assert "bad-\\xff-name" in message and "not UTF-8" in message


def test_a_job_of_two_agents_is_refused(job: Path):
    path = job / TRIAL / "result.json"
    data = json.loads(path.read_text())
    data["agent_info"]["name"] = "oracle"
    path.write_text(json.dumps(data))
    assert "2 agent and model pairs" in refused(job)


def test_deep_metrics_in_the_jobs_result_are_cut_not_a_traceback(job: Path):
    data = json.loads((job / "result.json").read_text())
    deep: object = 1
    for _ in range(900):
        deep = [deep]
    data["stats"]["evals"]["terminus-2__gpt-4o-mini__example_exact_match"]["metrics"] = deep
    (job / "result.json").write_text(json.dumps(data))
    metrics = read_job(job).details["metrics"]["terminus-2__gpt-4o-mini__example_exact_match"]
    assert metrics == [[[[None]]]]


def test_an_unreadable_result_json_is_refused(job: Path):
    """A result.json that cannot be opened as a file (a folder in its place: as root, no mode makes a file unreadable)."""
    result = job / TRIAL / "result.json"
    result.unlink()
    result.mkdir()
    assert "not a regular file" in refused(job, TRIAL, "result.json")


def test_a_missing_job_file_is_refused(job: Path, tmp_path: Path):
    (job / "config.json").unlink()
    assert "holds no config.json" in refused(job)
    with pytest.raises(ImportError_, match="not a Harbor job folder"):
        read_job(tmp_path / "nowhere")


def test_a_job_of_more_entries_than_it_reads_is_refused_before_they_are_read(job: Path, monkeypatch):
    monkeypatch.setattr(harbor, "MOST_TRIALS", 1)  # the job holds 6 trials and its own files: over 1 + 1000
    for n in range(1000):
        (job / f"extra-{n}").mkdir()
    assert "more than the 1 trials read of one job" in refused(job)
