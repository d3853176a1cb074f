"""``engine.Records`` against the real Snakemake: a tiny workflow runs in tmp_path and its records are read back.

Snakemake keys a record by the output path exactly as the workflow names it
(relative to the working directory, or absolute), and splits a long key over
several file names; ``agentcompass status`` depends on reading both kinds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentcompass.pipeline.engine import Records

LONG = "x" * 120 + "-" + "y" * 79  # a 200-byte path segment, as paths.task_segment may make one
PARAM = json.dumps({"stage": "1", "plan": "abc"}, sort_keys=True)

RECORDS_SNAKEFILE = """
import os, signal
from pathlib import Path

onstart:
    Path(".main-pid").write_text(str(os.getpid()))

rule all:
    input: "results/ns/run/request.json", "{outside}/ns/run/request.json", "results/ns/run/attempts/{long}/1/result.json"

rule write:
    output: "{{prefix}}/ns/run/{{name}}"
    wildcard_constraints: prefix="results|{outside}", name="request.json|attempts/.+"
    params: depends={param!r}
    run:
        Path(output[0]).write_text("done")

rule killed:
    output: "results/ns/run/killed.json"
    params: depends={param!r}
    run:
        Path(output[0]).write_text("half")
        # the run dies inside the job (the job may be a process of its own): Snakemake's marker stays
        os.kill(int(Path(".main-pid").read_text()), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
"""


def run_records_flow(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAKEMAKE")}
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(workdir / "Snakefile"), "--directory", str(workdir),
           "--cores", "1", *args]
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def records_flow(tmp_path_factory) -> tuple[Path, Path]:
    """A working folder where the workflow ran, and a results folder outside it."""
    root = tmp_path_factory.mktemp("engine")
    workdir, outside = root / "work", root / "outside-results"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(RECORDS_SNAKEFILE.format(outside=outside, long=LONG, param=PARAM))
    done = run_records_flow(workdir)
    assert done.returncode == 0, done.stderr[-3000:]
    killed = run_records_flow(workdir, "results/ns/run/killed.json")
    assert killed.returncode != 0 and (workdir / "results/ns/run/killed.json").exists()
    return workdir, outside


def test_records_of_relative_absolute_and_long_paths(records_flow):
    workdir, outside = records_flow
    records = Records.open(workdir)
    paths = ["results/ns/run/request.json", f"{outside}/ns/run/request.json", f"results/ns/run/attempts/{LONG}/1/result.json"]
    assert len(f"{workdir}/{paths[2]}".encode()) > 255  # its key spans more than one file name
    for path in paths:
        record = records.record(path)
        assert record is not None, path
        assert record.rule == "write"
        assert record.params == records.params_of([PARAM])
        assert record.param_values() == [PARAM]
        assert records.params_of([PARAM + " "]) != record.params


def test_a_record_is_keyed_by_the_path_as_the_workflow_names_it(records_flow):
    workdir, _ = records_flow
    records = Records.open(workdir)
    assert records.record("./results/ns/run/request.json") is None
    assert records.record(f"{workdir}/results/ns/run/request.json") is None
    assert records.record("results/ns/run/missing.json") is None


def test_incomplete_markers_of_a_killed_job(records_flow):
    workdir, outside = records_flow
    records = Records.open(workdir)
    assert records.any_incomplete()
    killed = "results/ns/run/killed.json"
    finished = ["results/ns/run/request.json", f"{outside}/ns/run/request.json", f"results/ns/run/attempts/{LONG}/1/result.json"]
    assert records.incomplete([killed, *finished]) == {killed}


def test_a_folder_where_snakemake_never_ran_has_no_records(tmp_path):
    assert Records.open(tmp_path) is None
