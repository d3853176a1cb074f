"""Results an earlier agentcompass built are reused: this code finds nothing to rebuild in them.

tests/data/old_results/<commit>.tar.gz is a results folder, with Snakemake's
per-file records (params and each rule's run-block text, its "code") and the
config that made it, built by the code of that commit
(scripts/make_old_results.py; tests/data/old_results/README.md). Snakemake
reruns a job when its params, its code, its set of inputs or an input's time
changes, so a dry run of this code over that folder that finds no job means
the rules' outputs, params and run blocks are what they were.

Each folder holds an unsharded request, a request built as two shard jobs
(whose inner runs keep their own per-attempt records, checked here too) and
one whose harness called a model on 127.0.0.1 (its params hold the model's
base_url; a dry run calls nothing). The folder of 7bc5c65 (the code before the
scopes became rows of the stage table) also holds a request with each task's
preflight, built in two shard jobs.
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pytest

from agentcompass.pipeline.shards import SHARD_ENV
from conftest import agentcompass, clean_env, snakemake

FIXTURES = Path(__file__).parent / "data" / "old_results"
# Where the fixtures were built: a request records its config files by absolute path
# (request.json's params), so the folder the test extracts one to takes this one's place.
GENERATED_IN = "/tmp/agentcompass-old-results"
# each fixture's requests, and the attempts of each shard job of its sharded requests (runtime.shard_size 6)
REQUESTS = {
    "ae18995": ("oracle-plain", "oracle-sharded", "chat-loopback"),
    "7bc5c65": ("oracle-plain", "oracle-sharded", "chat-loopback", "oracle-preflight-sharded"),
}
SLICES = {
    "ae18995": {"default/oracle-sharded": {0: 6, 1: 4}},
    "7bc5c65": {"default/oracle-sharded": {0: 6, 1: 4}, "default/oracle-preflight-sharded": {0: 6, 1: 2}},
}
SHARD_JOBS = [(commit, request, shard, attempts) for commit, requests in SLICES.items()
              for request, shards in requests.items() for shard, attempts in shards.items()]


def extract(dest: Path, commit: str) -> Path:
    """The fixture of ``commit`` unpacked into ``dest`` (file and folder times kept), moved there from GENERATED_IN."""
    dest.mkdir()
    if not re.fullmatch(r"[A-Za-z0-9/._-]+", str(dest)):
        pytest.skip(f"{dest}: the records hold the folder inside JSON text; a plain path keeps them valid")
    with tarfile.open(FIXTURES / f"{commit}.tar.gz") as tar:
        # "tar": the archive's own times and modes (Python 3.12 warns without a filter)
        tar.extractall(dest, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
    moved = []
    for record in sorted((dest / ".snakemake" / "metadata").iterdir()):
        text = record.read_text()
        if GENERATED_IN in text:
            record.write_text(text.replace(GENERATED_IN, str(dest)))
            moved.append(record.name)
    # exactly the request.json records hold the folder (their params' metadata.config_paths)
    assert len(moved) == len(REQUESTS[commit]), moved
    return dest


@pytest.fixture(params=sorted(REQUESTS))
def commit(request) -> str:
    return request.param


@pytest.fixture
def old_results(tmp_path: Path, commit: str) -> Path:
    return extract(tmp_path / "work", commit)


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


@pytest.mark.parametrize("commit, sharded, shard, attempts", SHARD_JOBS)
def test_a_shard_inner_run_over_old_results_finds_nothing_to_do(old_results: Path, sharded: str, shard: int,
                                                                 attempts: int):
    """A shard's inner run judges its slice's attempt files from their own records, as a plain run does."""
    env = clean_env(**{SHARD_ENV: f"{sharded}/{shard}"})
    assert_nothing_to_do(dry_run(old_results, "--nolock", env=env))
    # the same inner run, made to rebuild one stage: it plans exactly its slice, so its no-op above judged those files
    forced = planned_jobs(dry_run(old_results, "--nolock", "--forcerun", "evaluate", env=env))
    assert forced == {"evaluate": attempts}, forced


def test_status_over_old_results_says_nothing_would_rerun(old_results: Path, commit: str):
    done = agentcompass(old_results, "status", "-c", "configs/config.yaml")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    for name in REQUESTS[commit]:
        assert re.search(rf"^{re.escape(name)} .*\n(?:  .*\n)*?  up to date: nothing would rerun$", output, re.M), \
            f"{name}: status says something would rerun\n{output}"
    assert output.count("nothing would rerun") == len(REQUESTS[commit]), output
