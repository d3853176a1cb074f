"""No Python process of a run imports from the working folder.

The working folder holds a ``yaml.py`` and an ``agentcompass.py`` that would
leave a marker file if imported (and then fail the import). A real run, with
shards, is started there as a user starts one (the command's own process does
not put the folder on its path), without the profile that runs jobs in
threads: Snakemake starts each job as ``python -m snakemake`` in that folder
(as on a cluster), and each shard its inner run: none of them imports either
module, and the run succeeds.

Snakemake also appends ``.snakemake/pip-deployments`` (relative to the
working folder) to the import path, where optional imports (``simplejson``,
``ujson``, ``socks``, ...) look when the package is not installed. Modules
planted there are imported by neither the command's process nor any job: the
run is refused before its first job, naming the folder.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import clean_env, shard_logs

HOSTILE = (
    "import pathlib\n"
    "pathlib.Path({marker!r}).write_text('imported')\n"
    "raise ImportError('the {name}.py of the working folder was imported')\n"
)
CONFIG = {
    "requests": {"small": {"benchmark": {"id": "example_exact_match", "params": {"limit": 2}}, "harness": "oracle",
                           "model": {"id": "none"}}},
    "runtime": {"shard_size": 1},  # 2 attempts: 2 shards, each an inner run of its own
}


# optional imports of Snakemake's and its dependencies' (seen with python -vv), none installed here
OPTIONAL = ("simplejson", "ujson", "socks", "brotli", "brotlicffi", "cloudpickle", "pytz", "tornado")


def plant(folder: Path, names, markers: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / f"{name}.py").write_text(HOSTILE.format(marker=str(markers / name), name=name))


def run(workdir: Path) -> subprocess.CompletedProcess:
    (workdir / "eval.yaml").write_text(json.dumps(CONFIG))
    env = clean_env()
    env.pop("PYTHONSAFEPATH", None)  # the run sets it for its processes, or nothing does
    # the agentcompass command as installed: -P stands for its console script, whose folder is bin/. Without
    # the workflow profile (which runs jobs in threads), Snakemake starts each job as python -m snakemake in
    # the working folder, as it does on a cluster
    return subprocess.run([sys.executable, "-P", "-m", "agentcompass.cli", "run", "--config", "eval.yaml",
                           "--", "--workflow-profile", "none"],
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=600)


def test_a_module_planted_in_the_working_folder_is_never_imported(workdir: Path):
    markers = workdir.parent / "markers"
    markers.mkdir()
    plant(workdir, ["yaml", "agentcompass"], markers)
    done = run(workdir)
    assert sorted(p.name for p in markers.iterdir()) == [], done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(shard_logs(workdir)) == 2  # the inner runs ran, in the same folder
    results = sorted(workdir.glob("results/*/small/attempts/*/1/result.json"))
    assert len(results) == 2 and all(json.loads(p.read_text())["status"] == "completed" for p in results)


def test_modules_planted_where_snakemake_looks_for_pip_deployments_are_never_imported(workdir: Path):
    markers = workdir.parent / "markers"
    markers.mkdir()
    plant(workdir / ".snakemake" / "pip-deployments", OPTIONAL, markers)
    done = run(workdir)
    assert sorted(p.name for p in markers.iterdir()) == [], done.stderr[-3000:]
    assert done.returncode == 2 and ".snakemake/pip-deployments" in done.stderr, done.stderr[-3000:]
    assert not (workdir / "results").exists() or not list(workdir.glob("results/*/small/attempts/*/1/result.json"))
