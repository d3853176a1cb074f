"""Runtime retries absorb infrastructure faults inside the run stage; retention keeps sandboxes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import clean_env

DRIVER = Path(__file__).parent / "drivers" / "flaky_workflow.py"


def run_flaky(workdir: Path, failures: int, max_retries: int, retain: str = "never") -> dict:
    config = workdir / "flaky.yaml"
    config.write_text(json.dumps({"requests": {"flaky": {
        "benchmark": {"id": "example_exact_match", "params": {"limit": 2}},
        "harness": {"id": "test_flaky_sandbox", "params": {"failures": failures}},
        "model": {"id": "none"},
        "execution": {"max_retries": max_retries, "retain_environments": retain},
    }}}))
    done = subprocess.run([sys.executable, str(DRIVER), str(workdir), str(config)], cwd=workdir,
                          env=clean_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    base = workdir / "results/default/flaky/attempts"
    return {p.parent.parent.name: json.loads(p.read_text()) for p in base.glob("*/1/result.json")}


def test_infrastructure_faults_are_retried_and_counted(workdir: Path):
    results = run_flaky(workdir, failures=2, max_retries=2)
    assert set(results) == {"capital-france", "capital-japan"}
    for result in results.values():
        assert result["status"] == "completed" and result["correct"] is True
        assert result["retries_used"] == 2


def test_faults_beyond_max_retries_end_in_run_error_with_the_last_error(workdir: Path):
    results = run_flaky(workdir, failures=5, max_retries=1)
    for result in results.values():
        assert result["status"] == "run_error"
        assert result["retries_used"] == 1
        assert "sandbox died (call 2)" in result["error"]


def test_retention_always_keeps_the_sandbox_and_never_removes_it(workdir: Path, tmp_path: Path):
    kept = run_flaky(workdir, failures=0, max_retries=0, retain="always")
    paths = [Path(r["metadata"]["workspace"]) for r in kept.values()]
    try:
        assert paths and all(p.is_dir() for p in paths)
    finally:
        for p in paths:
            subprocess.run(["rm", "-rf", str(p)], check=False)
    other = tmp_path / "other"
    other.mkdir()
    removed = run_flaky(other, failures=0, max_retries=0, retain="never")
    assert not any(Path(r["metadata"]["workspace"]).exists() for r in removed.values())
