"""Shared helpers: run the real Snakemake workflow and the real CLI in a scratch directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SNAKEFILE = ROOT / "Snakefile"

# Every file the tests' runs write is checked against its schema, the per-attempt ones too
# (agentcompass.pipeline.files.checks_writes_of); subprocesses inherit it.
os.environ["AGENTCOMPASS_VALIDATE_WRITES"] = "1"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAKEMAKE")}
    env["AGENTCOMPASS_USER_CONFIG"] = ""  # never read the developer's own user config
    env.update(extra)
    return env


def snakemake(workdir: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``snakemake`` as a user runs it, on this repository's Snakefile, in ``workdir``."""
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir), "--cores", "2", *args]
    return subprocess.run(cmd, cwd=workdir, env=env or clean_env(), capture_output=True, text=True, timeout=600)


def agentcompass(workdir: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "agentcompass.cli", *args]
    return subprocess.run(cmd, cwd=workdir, env=env or clean_env(), capture_output=True, text=True, timeout=600)


def jobs_run(output: str) -> dict[str, int]:
    """How many jobs of each rule finished, read from Snakemake's log lines."""
    counts: dict[str, int] = {}
    for rule in re.findall(r"Finished jobid: \d+ \(Rule: (\w+)\)", output):
        counts[rule] = counts.get(rule, 0) + 1
    counts.pop("all", None)
    return counts


def announced(output: str) -> list[str]:
    """The rules of the jobs Snakemake announced as it started them (its "rule NAME:" blocks)."""
    return re.findall(r"^(?:local)?rule (\w+):$", output, re.M)


def shard_logs(workdir: Path) -> dict[Path, int]:
    """Each shard's log (its inner Snakemake's output) and when it was written."""
    return {p: p.stat().st_mtime_ns for p in workdir.glob("results/*/*/shards/*/shard.log")}


def jobs_run_with_shards(workdir: Path, output: str, logs_before: dict[Path, int]) -> dict[str, int]:
    """``jobs_run`` of a run, plus the jobs of the shards it ran (their logs written since ``logs_before``)."""
    counts = jobs_run(output)
    for path, stamp in shard_logs(workdir).items():
        if logs_before.get(path) != stamp:
            for rule, n in jobs_run(path.read_text()).items():
                counts[rule] = counts.get(rule, 0) + n
    return counts


def entries_under(root: Path) -> list[Path]:
    """Every entry under ``root``, at any depth and with any name; links are listed, never followed."""
    found, stack = [], [root]
    while stack:  # a stack, not recursion: an agent's tree may be thousands of levels deep
        folder = stack.pop()
        try:
            listing = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in listing:
            path = Path(os.fsdecode(entry.path))
            found.append(path)
            if entry.is_dir(follow_symlinks=False):
                stack.append(path)
    return found


def regular_files(*roots: Path) -> list[Path]:
    """The regular files under ``roots`` (not links to them, never a FIFO or a device)."""
    return [p for root in roots for p in entries_under(root) if not p.is_symlink() and p.is_file()]


def files_holding(secret: str, *roots: Path) -> tuple[list[Path], int]:
    """The regular files under ``roots`` whose bytes contain ``secret``, and how many files were read."""
    files = regular_files(*roots)
    return [p for p in files if secret.encode() in p.read_bytes()], len(files)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path
