"""Live progress: one line per request on a terminal, nothing extra elsewhere."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from agentcompass.progress import RequestProgress
from conftest import SNAKEFILE, clean_env, snakemake


def write_result(path: Path, status: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"status": status}))


def test_a_request_line_counts_done_attempts_errors_and_gives_an_eta(tmp_path: Path):
    run = tmp_path / "results/default/r"
    run.mkdir(parents=True)
    progress = RequestProgress("r", run, attempts_per_task=2)
    progress.refresh()
    assert progress.line(1.0) == "r: loading tasks"
    (run / "tasks.json").write_text(json.dumps({"tasks": [{"task_id": "a/1"}, {"task_id": "b"}]}))
    progress.refresh()
    assert progress.line(1.0) == "r: 0/4 attempts (0%), 0 errors"
    write_result(run / "attempts/a%2F1/1/result.json", "completed")
    write_result(run / "attempts/b/2/result.json", "run_error")
    progress.refresh()
    assert progress.line(10.0) == "r: 2/4 attempts (50%), 1 errors, ETA 0m10s"


def test_terminal_run_shows_one_live_line_per_request(workdir: Path):
    # a real pseudo-terminal, as a user's shell would give Snakemake
    leader, follower = os.openpty()
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir), "--cores", "2"]
    proc = subprocess.Popen(cmd, cwd=workdir, env=clean_env(TERM="xterm"), stdin=subprocess.DEVNULL,
                            stdout=follower, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=300) == 0
    os.close(leader)
    screen = b"".join(chunks).decode(errors="replace")
    assert "example-oracle: 5/5 attempts (100%), 0 errors" in screen
    # per-job chatter is held back on a terminal
    assert "Finished jobid" not in screen.split("example-oracle:", 1)[1]


def test_no_progress_line_when_not_a_terminal(workdir: Path):
    done = snakemake(workdir)
    assert done.returncode == 0
    assert not re.search(r"attempts \(\d+%\)", done.stdout + done.stderr)
    assert "Finished jobid" in done.stderr
