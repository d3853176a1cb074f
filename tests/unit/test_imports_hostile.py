"""Imports are untrusted data: a hostile ``.eval`` log is refused with an ``ImportError_`` naming it, and the
commands that read runs (``compare``, ``runs``, ``export``, ``report``) exit 2 saying so, never with a traceback;
nothing is written where the import is. Also the reader's mapping of Inspect's scores and errors."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from agentcompass import imports, results
from agentcompass.imports import inspect as inspect_log


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentcompass.cli", *args], cwd=cwd, capture_output=True,
                          timeout=120, env={**os.environ, "AGENTCOMPASS_USER_CONFIG": ""})


def hostile(tmp_path: Path, kind: str) -> tuple[bytes, str]:
    """A hostile import of ``kind`` in ``tmp_path``: (its path as bytes, what the refusal says)."""
    inside = tmp_path / "imports"
    inside.mkdir()
    if kind == "link":  # a log that points out of the folder it is in
        outside = tmp_path / "secret.eval"
        outside.write_bytes(b"not yours")
        (inside / "x.eval").symlink_to(outside)
        return os.fsencode(inside / "x.eval"), "symbolic link"
    if kind == "huge":  # sparse: over the cap, and nothing to read
        with open(inside / "x.eval", "wb") as handle:
            handle.truncate(inspect_log.MOST_BYTES + 1)
        return os.fsencode(inside / "x.eval"), "more than the"
    if kind == "truncated":  # a zip archive cut in half
        with zipfile.ZipFile(inside / "whole.eval", "w") as archive:
            archive.writestr("header.json", "{" + '"x": 1, ' * 5000 + '"y": 2}')
        data = (inside / "whole.eval").read_bytes()
        (inside / "whole.eval").unlink()
        (inside / "x.eval").write_bytes(data[: len(data) // 2])
        return os.fsencode(inside / "x.eval"), "not a whole .eval log"
    if kind == "garbage":  # a zip archive that is no log
        with zipfile.ZipFile(inside / "x.eval", "w") as archive:
            archive.writestr("header.json", "[not, json")
        return os.fsencode(inside / "x.eval"), "cannot be read as an Inspect log"
    if kind == "name":  # a name that is not UTF-8, with a terminal escape in it
        path = os.fsencode(inside) + b"/bad\xff\x1b[31m.eval"
        with open(path, "wb") as handle:
            handle.write(b"\x00garbage")
        return path, "not a whole .eval log"
    if kind == "folder":
        (inside / "x.eval").mkdir()
        return os.fsencode(inside / "x.eval"), "is a folder"
    raise AssertionError(kind)


KINDS = ("link", "huge", "truncated", "garbage", "name", "folder")


@pytest.mark.parametrize("kind", KINDS)
def test_a_hostile_log_is_refused_naming_it(tmp_path, kind):
    if kind == "garbage":
        pytest.importorskip("inspect_ai")
    path, says = hostile(tmp_path, kind)
    before = sorted(os.listdir(os.path.dirname(path)))
    with pytest.raises(imports.ImportError_) as refused:
        results.open_run(os.fsdecode(path))
    message = str(refused.value)
    assert says in message and "Fix:" in message
    # named as it is, escaped: no byte that is not UTF-8, no control character reaches a terminal
    assert imports.shown(os.fsdecode(path)) in message and "\x1b" not in message
    message.encode("utf-8")
    assert sorted(os.listdir(os.path.dirname(path))) == before


@pytest.mark.parametrize("kind", ["link", "truncated", "name", "folder"])
def test_the_commands_exit_2_on_a_hostile_log_without_a_traceback(tmp_path, kind):
    path, says = hostile(tmp_path, kind)
    name = os.fsdecode(path)
    for args in (["compare", name, name], ["runs", name], ["export", name], ["report", name]):
        done = cli(tmp_path, *args)
        stderr = done.stderr.decode("utf-8")  # escaped: always UTF-8
        assert done.returncode == 2, (args, stderr)
        assert says in stderr and "Traceback" not in stderr and "\x1b" not in stderr, (args, stderr)
        if kind == "name":
            assert "bad\\xff\\x1b[31m.eval" in stderr
    assert not (tmp_path / "imports" / "x.eval" / "report").exists()


def test_a_results_root_never_lists_an_import(tmp_path):
    (tmp_path / "run.eval").write_bytes(b"anything")
    assert results.find_runs(tmp_path) == []


@pytest.mark.parametrize("value, expected", [
    ("C", (1.0, True)), ("I", (0.0, False)), ("correct", (1.0, True)), ("incorrect", (0.0, False)),
    ("P", (0.5, False)), ("N", (0.0, False)), (True, (1.0, True)), (False, (0.0, False)),
    (1, (1.0, True)), (0.25, (0.25, False)), ("0.75", (0.75, False)), ({"a": 1}, (None, None)), ("maybe", (None, None)),
])
def test_a_scorers_value_maps_to_a_score_and_correct(value, expected):
    assert inspect_log.score_of(value) == expected


@pytest.mark.parametrize("traceback, expected", [
    ("Traceback...\nopenai.InternalServerError: Error code: 500\n\nDuring handling...\n"
     "tenacity.RetryError: RetryError[<Future raised InternalServerError>]\n", "endpoint"),
    ("Traceback...\nhttpx.ConnectError: refused\n", "endpoint"),
    ("Traceback...\ninspect_ai.util._limit.LimitExceededError: token limit\n", "limit"),
    ("Traceback...\ninspect_ai.util._sandbox.SandboxError: container died\n", "infrastructure"),
    ("Traceback...\ndocker.errors.APIError: 500 Server Error\n", "infrastructure"),
    ("Traceback...\nKeyError: 'answer'\n", "harness"),
    # a message that only mentions a type is not its type
    ("Traceback...\nValueError: the model said openai.RateLimitError\n", "harness"),
])
def test_a_samples_error_maps_to_a_failure_class_by_its_type(traceback, expected):
    assert inspect_log.failure_class(traceback) == expected


def test_a_log_that_would_unpack_to_too_much_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(inspect_log, "MOST_UNPACKED", 1000)
    with zipfile.ZipFile(tmp_path / "bomb.eval", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("samples/1.json", b"0" * 2000)  # a few bytes packed, 2000 unpacked
    with pytest.raises(imports.ImportError_, match="would unpack to more than 1,000 bytes"):
        imports.read_import(tmp_path / "bomb.eval")


def sample(**fields):
    """A stand-in for an Inspect sample, with what the reader reads of one."""
    from types import SimpleNamespace

    base = {"id": 7, "epoch": 2, "metadata": {"category": "science"}, "error": None, "limit": None, "scores": {},
            "model_usage": {}, "events": [], "total_time": 3.5, "working_time": 1.25}
    return SimpleNamespace(**{**base, **fields})


def test_a_sample_becomes_an_attempt():
    from types import SimpleNamespace

    scored = inspect_log._attempt(sample(
        scores={"first": SimpleNamespace(value="C", answer="H2O"), "second": SimpleNamespace(value="I", answer="x")},
        model_usage={"m1": SimpleNamespace(input_tokens=10, output_tokens=3),
                     "m2": SimpleNamespace(input_tokens=5, output_tokens=None)},
        events=[SimpleNamespace(event="model", working_time=0.5), SimpleNamespace(event="score")]))
    assert (scored.task_id, scored.attempt, scored.status, scored.score, scored.correct, scored.answer) == \
        ("7", 2, "completed", 1.0, True, "H2O")  # the first scorer's value
    assert scored.usage == {"prompt_tokens": 15, "completion_tokens": 3, "calls": 1, "latency_seconds": 0.5}
    assert scored.timings == {"run_seconds": 3.5, "working_seconds": 1.25} and scored.category == "science"
    limited = inspect_log._attempt(sample(limit=SimpleNamespace(type="token", limit=100),
                                          scores={"s": SimpleNamespace(value="C", answer="x")}))
    assert (limited.status, limited.failure_class, limited.score, limited.correct) == ("run_error", "limit", None, None)
    assert limited.error == "limit reached: token (100)"
    unscored = inspect_log._attempt(sample())
    assert (unscored.status, unscored.failure_class) == ("eval_error", "verifier")
    failed = inspect_log._attempt(sample(error=SimpleNamespace(message="boom", traceback="KeyError: 'x'\n")))
    assert (failed.status, failed.failure_class, failed.error) == ("run_error", "harness", "boom")


def test_a_reader_plugs_in_by_its_module_and_an_absent_one_is_not_asked(tmp_path, monkeypatch):
    """The Harbor reader (agentcompass.imports.harbor: is_job, read_job) is found by its module's name: a stand-in
    module there makes a job folder a run of every view; with no module at all, nothing is an import but a log."""
    from types import ModuleType

    from agentcompass import compare

    job = tmp_path / "job"
    job.mkdir()
    (job / "config.json").write_text("{}")
    fake = ModuleType("agentcompass.imports.harbor")
    fake.is_job = lambda path: (path / "config.json").is_file()  # type: ignore[attr-defined]
    fake.read_job = lambda path: imports.ImportedRun(  # type: ignore[attr-defined]
        "harbor", path, "job-1", "terminal-bench", "oracle", "none", (
            imports.ImportedAttempt("t1", 1, "completed", score=1.0, correct=True),
            imports.ImportedAttempt("t2", 1, "run_error", error="sandbox died", failure_class="infrastructure")))
    monkeypatch.setitem(sys.modules, "agentcompass.imports.harbor", fake)
    [run] = results.find_runs(job)
    rows = list(results.rows(run))
    assert (run.namespace, run.run_id, run.component("harness")) == ("imported", "job-1", "oracle")
    assert [(r["task_id"], r["status"], r["left_out"], r["flagged"]) for r in rows] == [
        ("t1", "completed", None, None), ("t2", "run_error", "infrastructure", None)]
    assert run.attempts() == [] and run.metrics() is None
    assert results.overview(run)["scored_on"]["infrastructure"] == 1
    [c] = compare.compare([job, job], resamples=10)
    assert (c.paired, c.infrastructure) == (1, 1)
    # no reader module there: the folder is nothing a reader knows
    monkeypatch.setattr(imports, "READERS", (("agentcompass.imports.no_such_reader", "is_job", "read_job"),))
    assert not imports.is_import(job)
    with pytest.raises(FileNotFoundError):
        results.open_run(job)
