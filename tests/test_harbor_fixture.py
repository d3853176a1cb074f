"""tests/data/harbor_job stays Harbor's: scripts/make_harbor_job.py, run with a Python that has Harbor
(AGENTCOMPASS_HARBOR_PYTHON), writes it again through Harbor's own result models, and it reads the same.

Harbor needs Python >= 3.12 and agentcompass never imports it: the script runs in Harbor's own Python. CI sets
AGENTCOMPASS_HARBOR_PYTHON; there, a missing one fails the test (the fixture would drift from Harbor unnoticed)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from agentcompass.imports.harbor import read_job

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "harbor_job"
SCRIPT = ROOT / "scripts" / "make_harbor_job.py"


def harbor_python() -> str:
    python = os.environ.get("AGENTCOMPASS_HARBOR_PYTHON", "")
    if not python:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but AGENTCOMPASS_HARBOR_PYTHON is not set: set it to the Python of a venv with "
                        "harbor installed, so that tests/data/harbor_job is checked against Harbor's own code")
        pytest.skip("AGENTCOMPASS_HARBOR_PYTHON is not set (the Python of a venv with harbor installed)")
    return python


def comparable(path: Path) -> dict:
    """What read_job makes of a job folder, but where it is."""
    run = read_job(path)
    return {**dataclasses.asdict(run), "path": None}


def test_the_committed_job_is_the_one_harbors_models_write(tmp_path: Path):
    python = harbor_python()
    out = tmp_path / "harbor_job"
    made = subprocess.run([python, str(SCRIPT), str(out)], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    assert comparable(out) == comparable(FIXTURE)
    # the same files, each the same but for where Harbor says the trial was (its absolute trial_uri)
    made_files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert made_files == sorted(p.relative_to(FIXTURE) for p in FIXTURE.rglob("*") if p.is_file())
    for name in made_files:
        ours = [line for line in (FIXTURE / name).read_text().splitlines() if '"trial_uri"' not in line
                and '"trials_dir"' not in line and '"jobs_dir"' not in line]
        theirs = [line for line in (out / name).read_text().splitlines() if '"trial_uri"' not in line
                  and '"trials_dir"' not in line and '"jobs_dir"' not in line]
        assert ours == theirs, name
