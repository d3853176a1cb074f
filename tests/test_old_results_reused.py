"""Results an earlier agentcompass built are reused: this code finds nothing to rebuild in them.

tests/data/old_results/ae18995.tar.gz is a results folder, with Snakemake's
per-file records (params and each rule's run-block text, its "code") and the
config that made it, built by the code of commit ae18995
(scripts/make_old_results.py; tests/data/old_results/README.md). Snakemake
reruns a job when its params, its code, its set of inputs or an input's time
changes, so a dry run of this code over that folder that finds no job means
the rules' outputs, params and run blocks are what they were.

The folder holds an unsharded request, a request built as two shard jobs
(whose inner runs keep their own per-attempt records, checked here too) and
one whose harness called a model on 127.0.0.1 (its params hold the model's
base_url; a dry run calls nothing).
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pytest

from agentcompass.pipeline.shards import SHARD_ENV
from conftest import agentcompass, clean_env, snakemake

FIXTURE = Path(__file__).parent / "data" / "old_results" / "ae18995.tar.gz"
# Where the fixture was built: a request records its config files by absolute path
# (request.json's params), so the folder the test extracts it to takes this one's place.
GENERATED_IN = "/tmp/agentcompass-old-results"
REQUESTS = ("oracle-plain", "oracle-sharded", "chat-loopback")
# The sharded request: its shard jobs and the attempts of each slice (runtime.shard_size 6, 10 attempts)
SHARDED = "default/oracle-sharded"
SLICES = {0: 6, 1: 4}


def extract(dest: Path) -> Path:
    """The fixture unpacked into ``dest`` (file and folder times kept), moved there from GENERATED_IN."""
    dest.mkdir()
    if not re.fullmatch(r"[A-Za-z0-9/._-]+", str(dest)):
        pytest.skip(f"{dest}: the records hold the folder inside JSON text; a plain path keeps them valid")
    with tarfile.open(FIXTURE) as tar:
        # "tar": the archive's own times and modes (Python 3.12 warns without a filter)
        tar.extractall(dest, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
    moved = []
    for record in sorted((dest / ".snakemake" / "metadata").iterdir()):
        text = record.read_text()
        if GENERATED_IN in text:
            record.write_text(text.replace(GENERATED_IN, str(dest)))
            moved.append(record.name)
    # exactly the three request.json records hold the folder (their params' metadata.config_paths)
    assert len(moved) == len(REQUESTS), moved
    return dest


@pytest.fixture
def old_results(tmp_path: Path) -> Path:
    return extract(tmp_path / "work")


def dry_run(folder: Path, *args: str, env: dict | None = None) -> str:
    done = snakemake(folder, "-n", "--configfile", str(folder / "configs" / "config.yaml"), *args, env=env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def planned_jobs(output: str) -> dict[str, int]:
    """The job stats table of a dry run, by rule (empty when it found nothing to do)."""
    table = re.search(r"^Job stats:\n.*?\n-+ +-+\n(.*?)^total", output, re.S | re.M)
    if table is None:
        return {}
    return {rule: int(n) for rule, n in re.findall(r"^(\w+) +(\d+)$", table.group(1), re.M) if rule != "all"}


def assert_nothing_to_do(output: str) -> None:
    jobs = planned_jobs(output)
    assert not jobs and "Nothing to be done" in output, (
        f"jobs the dry run would run over the old results: {jobs}\n{output}")


def test_a_dry_run_over_old_results_finds_nothing_to_do(old_results: Path):
    """The whole workflow's DAG: every request's bulk files, attempts, shard jobs, metrics and report."""
    assert_nothing_to_do(dry_run(old_results))


@pytest.mark.parametrize("shard", sorted(SLICES))
def test_a_shard_inner_run_over_old_results_finds_nothing_to_do(old_results: Path, shard: int):
    """A shard's inner run judges its slice's attempt files from their own records, as a plain run does."""
    env = clean_env(**{SHARD_ENV: f"{SHARDED}/{shard}"})
    assert_nothing_to_do(dry_run(old_results, "--nolock", env=env))
    # the same inner run, made to rebuild one stage: it plans exactly its slice, so its no-op above judged those files
    forced = planned_jobs(dry_run(old_results, "--nolock", "--forcerun", "evaluate", env=env))
    assert forced == {"evaluate": SLICES[shard]}, forced


def test_status_over_old_results_says_nothing_would_rerun(old_results: Path):
    done = agentcompass(old_results, "status", "-c", "configs/config.yaml")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    for name in REQUESTS:
        assert re.search(rf"^{re.escape(name)} .*\n(?:  .*\n)*?  up to date: nothing would rerun$", output, re.M), \
            f"{name}: status says something would rerun\n{output}"
    assert output.count("nothing would rerun") == len(REQUESTS), output
