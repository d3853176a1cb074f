"""Environments under the real workflow: isolated phases end to end, and a killed run cleaned up.

The workflow runs in a child process (``workflow_driver.py``) with a harness
that uses its sandbox, the way ``agentcompass run`` drives Snakemake in its
own process; killing that child is killing Snakemake.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from agentcompass.environments.leftovers import LABEL_VAR, environment_markers
from agentcompass.environments.netns import network_isolation

from .envkit import TEST_IMAGE, clean_env, require_docker

DRIVER = Path(__file__).resolve().parent / "workflow_driver.py"


def environment_of(provider: str) -> dict:
    if provider == "docker":
        require_docker()
        return {"id": "docker", "params": {"image": TEST_IMAGE}}
    if not network_isolation()[0]:
        pytest.skip(f"host_process cannot isolate here: {network_isolation()[1]}")
    return {"id": "host_process"}


def driver_argv(workdir: Path, config: Path, *extra: str) -> list[str]:
    return [sys.executable, str(DRIVER), str(workdir), str(config), *extra]


def write_config(workdir: Path, run_id: str, environment: dict) -> Path:
    config = {
        "requests": {
            run_id: {
                "benchmark": {"id": "example_exact_match", "params": {"limit": 2}},
                "harness": "test_sandbox_probe",
                "model": {"id": "none"},
                "environment": {**environment, "baseline_network": "none", "run_network": "none",
                                "evaluation_network": "none"},
            }
        }
    }
    path = workdir / "eval.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def containers_of(run_id: str) -> list[str]:
    if os.environ.get("DOCKER_HOST") is None and not Path("/var/run/docker.sock").exists():
        return []
    import docker

    try:
        client = docker.from_env()
    except docker.errors.DockerException:
        return []
    try:
        return [
            c.name for c in client.containers.list(all=True, filters={"label": "agentcompass=1"}, ignore_removed=True)
            if c.labels.get("agentcompass.label", "").startswith(f"{run_id}-")
        ]
    finally:
        client.close()


def processes_of(run_id: str) -> list[int]:
    return [
        int(p) for p in os.listdir("/proc")
        if p.isdigit() and environment_markers(int(p)).get(LABEL_VAR, "").startswith(f"{run_id}-")
    ]


def workspaces_of(run_id: str) -> list[str]:
    return [str(p) for p in Path(tempfile.gettempdir()).glob(f"agentcompass-{run_id}-*")]


def remains(run_id: str) -> list:
    deadline = time.monotonic() + 5
    while (left := containers_of(run_id) + processes_of(run_id) + workspaces_of(run_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.parametrize("provider", ["host_process", "docker"])
def test_full_evaluation_with_every_phase_isolated_completes_and_leaves_nothing(provider, workdir):
    environment = environment_of(provider)
    run_id = f"isolated{provider.replace('_', '')}{time.time_ns()}"
    config = write_config(workdir, run_id, environment)
    done = subprocess.run(driver_argv(workdir, config), cwd=workdir, env=clean_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    run = workdir / "results" / "default" / run_id
    metrics = json.loads((run / "metrics.json").read_text())
    # the probe answers correctly only where its run phase saw no route out
    assert metrics["counts"] == {"completed": 2} and metrics["metrics"]["accuracy"] == 1.0
    plan = json.loads(next((run / "attempts").glob("*/1/plan.json")).read_text())
    assert plan["run_network"] == {"mode": "none"}
    assert remains(run_id) == []


@pytest.mark.parametrize("provider", ["host_process", "docker"])
def test_kill_9_of_snakemake_mid_run_then_clean_leaves_nothing(provider, workdir):
    environment = environment_of(provider)
    run_id = f"killed{provider.replace('_', '')}{time.time_ns()}"
    config = write_config(workdir, run_id, environment)
    snakemake = subprocess.Popen(driver_argv(workdir, config, "hold"), cwd=workdir, env=clean_env(),
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert snakemake.stdout.readline().strip() == "holding", "the run stage never reached its sandbox"
        before = containers_of(run_id) + processes_of(run_id)
        assert before, "the run stage's sandbox exists while it runs"
        if provider == "host_process":
            assert workspaces_of(run_id), "and its workspace"
        os.kill(snakemake.pid, signal.SIGKILL)
        snakemake.wait()
        cleaned = subprocess.run([sys.executable, "-m", "agentcompass.cli", "clean", "--run", run_id],
                                 capture_output=True, text=True, timeout=120, env=clean_env())
        assert cleaned.returncode == 0, cleaned.stderr
        assert remains(run_id) == []
    finally:
        if snakemake.poll() is None:
            os.killpg(snakemake.pid, signal.SIGKILL)
            snakemake.wait()
        subprocess.run([sys.executable, "-m", "agentcompass.cli", "clean", "--run", run_id, "--all"],
                       capture_output=True, timeout=120, env=clean_env())
