"""Installed, not cloned: the built package carries the workflow and runs in any folder.

The wheel is built from this clone (setup.py copies the Snakefile, rules/, schemas/, configs/,
profiles/ and examples/ into agentcompass/workflow/), installed outside it, and run in an
empty folder: `agentcompass init` then `agentcompass run` build the example request there.
test_clean_venv_install installs it with its dependencies from the package index into a new
virtual environment: it runs where AGENTCOMPASS_PACKAGE_INDEX=1 (CI) and fails there rather
than skip; elsewhere it is skipped, as it downloads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, clean_env

OPT_IN = "AGENTCOMPASS_PACKAGE_INDEX"
METRICS = Path("results/default/example-oracle/metrics.json")
WORKFLOW_FILES = ["Snakefile", "rules/common.smk", "rules/captions/workflow.rst", "schemas/config.schema.yaml",
                  "schemas/result.schema.json", "configs/config.yaml", "profiles/default/config.yaml",
                  "profiles/slurm/config.yaml", "examples/task_dir/hello-file/task.toml"]


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def accuracy(project: Path) -> float:
    return json.loads((project / METRICS).read_text())["metrics"]["accuracy"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of this clone, built with this environment's setuptools (no download)."""
    out = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
        ROOT, clean_env())
    (found,) = out.glob("agentcompass-*.whl")
    return found


def test_wheel_carries_the_workflow(wheel):
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [f for f in WORKFLOW_FILES if f"agentcompass/workflow/{f}" not in names]
    assert not missing, f"the wheel lacks {missing}"
    assert "agentcompass/py.typed" in names  # its type hints are part of the API
    # one copy in git: the files are copied at build time, never kept under agentcompass/
    assert not (ROOT / "agentcompass" / "workflow").exists()


def test_installed_package_runs_in_an_empty_folder(wheel, workdir):
    """The wheel installed outside the clone: init and run in an empty folder use its own workflow files."""
    site = workdir / "site"
    run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(wheel)],
        workdir, clean_env())
    project = workdir / "project"
    project.mkdir()
    # the installed copy first on the path: this environment gives only its dependencies
    env = clean_env(PYTHONPATH=str(site))
    where = run([sys.executable, "-c", "import agentcompass; print(agentcompass.PROJECT_ROOT)"], project, env)
    assert Path(where.stdout.strip()) == site / "agentcompass" / "workflow"

    run([sys.executable, "-m", "agentcompass.cli", "init", "."], project, env)
    assert yaml.safe_load((project / "configs" / "config.yaml").read_text())["requests"]["example-oracle"]
    assert (project / "profiles" / "default" / "config.yaml").is_file()
    done = run([sys.executable, "-m", "agentcompass.cli", "run"], project, env)
    assert "example-oracle: completed" in done.stdout
    assert accuracy(project) == 1.0


def test_snakemake_module_from_init(workdir):
    """`agentcompass init` writes a Snakefile that uses the workflow as a Snakemake module; real
    snakemake in that folder builds the example request, and a rule of the user's own runs after it."""
    project = workdir / "project"
    env = clean_env()
    run([sys.executable, "-m", "agentcompass.cli", "init", str(project)], workdir, env)
    snakefile = project / "Snakefile"
    # the guide's rule of one's own (docs/install.md)
    snakefile.write_text(snakefile.read_text() + f"""
rule summary:
    input: "{METRICS}"
    output: "summary.txt"
    shell: "cp {{input}} {{output}}"
""")
    # no target: the workflow's `all` is the default target here too
    run([sys.executable, "-m", "snakemake", "--cores", "2"], project, env)
    assert accuracy(project) == 1.0
    assert not (project / "summary.txt").exists()
    # the workflow's onstart and onsuccess ran though it is a module: the run's events are written
    lines = (project / METRICS).with_name("events.jsonl").read_text().splitlines()
    events = [json.loads(line)["event"] for line in lines]
    assert events[0] == "request_started" and events[-1] == "request_finished", events
    assert json.loads(lines[-1])["outcome"]["state"] == "completed"
    run([sys.executable, "-m", "snakemake", "--cores", "2", "summary.txt"], project, env)
    assert (project / "summary.txt").read_text() == (project / METRICS).read_text()


def test_init_writes_nothing_over_a_project(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "config.yaml").write_text("requests: {}\n")
    done = subprocess.run([sys.executable, "-m", "agentcompass.cli", "init", str(tmp_path)], cwd=tmp_path,
                          env=clean_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "already holds configs/config.yaml" in done.stderr and "Fix:" in done.stderr
    assert (tmp_path / "configs" / "config.yaml").read_text() == "requests: {}\n"
    assert not (tmp_path / "Snakefile").exists() and not (tmp_path / "profiles").exists()


@pytest.mark.skipif(os.environ.get(OPT_IN) != "1", reason=f"downloads the dependencies: set {OPT_IN}=1 (CI does)")
@pytest.mark.slow(reason="installs the wheel's dependencies into a new virtual environment from the package index")
def test_clean_venv_install(workdir):
    """pip installs the wheel and its dependencies into a new virtual environment; there
    `agentcompass init` + `agentcompass run` in an empty folder build the example request."""
    sdist_wheel = workdir / "wheel"
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(sdist_wheel), str(ROOT)], ROOT, clean_env())
    (built,) = sdist_wheel.glob("agentcompass-*.whl")
    env_dir = workdir / "venv"
    venv.create(env_dir, with_pip=True)
    run([str(env_dir / "bin" / "pip"), "install", "--quiet", str(built)], workdir, clean_env())
    project = workdir / "project"
    project.mkdir()
    env = clean_env(PATH=f"{env_dir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("PYTHONPATH", None)
    run([str(env_dir / "bin" / "agentcompass"), "init"], project, env)
    done = run([str(env_dir / "bin" / "agentcompass"), "run"], project, env)
    assert "example-oracle: completed" in done.stdout
    assert accuracy(project) == 1.0
