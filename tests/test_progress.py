"""Live progress: one line per request on a terminal, nothing extra elsewhere."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from agentcompass._util import jsonio
from agentcompass.cli.run import _outcome_line
from agentcompass.pipeline.events import EVENTS_FILE
from agentcompass.pipeline.progress import RequestProgress
from agentcompass.runtime.models import RequestOutcome
from agentcompass.testing.endpoint import ScriptedEndpoint, completion
from conftest import SNAKEFILE, clean_env, snakemake


def test_a_request_line_counts_what_this_invocation_builds(tmp_path: Path):
    events = tmp_path / EVENTS_FILE

    def append(kind: str, invocation: str = "now", **fields) -> None:
        jsonio.append_line(events, {"event": kind, "invocation": invocation, **fields})

    append("request_started", "before")
    append("attempt_finished", "before", task_id="a", attempt=1, status="completed")
    progress = RequestProgress.of("r", tmp_path, offset=None)  # from the file's end, as a run's line
    append("attempt_finished", "stale", task_id="a", attempt=1, status="completed")  # a killed run's shard
    progress.refresh()
    assert progress.line(1.0) == "r: planning"
    append("request_started")
    append("attempts_planned", shard=0, attempts=3)  # a shard will run: its whole slice, until it counts
    append("attempts_planned", shard=1, attempts=2)
    progress.refresh()
    assert progress.line(1.0) == "r: 0/5 attempts (0%), 0 errors"
    append("attempts_planned", shard=0, attempts=1)
    append("attempt_finished", task_id="a/1", attempt=1, status="completed")
    append("attempt_finished", task_id="b", attempt=2, status="run_error")
    append("attempt_finished", "stale", task_id="c", attempt=1, status="completed")
    progress.refresh()
    assert progress.line(10.0) == "r: 2/3 attempts (67%), 1 errors, ETA 0m05s"

    nothing = RequestProgress.of("q", tmp_path / "q")
    nothing.apply({"event": "request_started", "invocation": "now"})
    nothing.apply({"event": "request_finished", "invocation": "now"})
    assert nothing.line(1.0) == "q: nothing to build (every attempt is up to date)"


def on_a_terminal(workdir: Path, cmd: list[str]) -> tuple[int, str]:
    """Run ``cmd`` with a real pseudo-terminal as its output, as a user's shell would; what it wrote."""
    leader, follower = os.openpty()
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
    code = proc.wait(timeout=300)
    os.close(leader)
    return code, b"".join(chunks).decode(errors="replace")


def counts(screen: str, name: str) -> list[tuple[int, int]]:
    """Each drawing of the request's line: (done, total)."""
    return [(int(d), int(t)) for d, t in re.findall(rf"{re.escape(name)}: (\d+)/(\d+) attempts", screen)]


def test_terminal_run_shows_one_live_line_per_request(workdir: Path):
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir), "--cores", "2"]
    code, screen = on_a_terminal(workdir, cmd)
    assert code == 0
    assert "example-oracle: 5/5 attempts (100%), 0 errors" in screen
    # per-job chatter is held back on a terminal
    assert "Finished jobid" not in screen.split("example-oracle:", 1)[1]


def test_a_rerun_after_a_change_counts_only_what_it_reruns(workdir: Path):
    name = "example_exact_match-chat-scripted"
    with ScriptedEndpoint(lambda body: completion("Paris")) as endpoint:
        def run(temperature: float) -> list[tuple[int, int]]:
            code, screen = on_a_terminal(workdir, [
                sys.executable, "-m", "agentcompass.cli", "run", "example_exact_match", "chat", "scripted",
                "--base-url", endpoint.base_url, "-m", f"temperature={temperature}"])
            assert code == 0, screen[-3000:]
            return counts(screen, name)

        assert run(0)[-1] == (5, 5)
        # every attempt's answer changes with the temperature: all 5 are this run's, none done at its start
        again = run(0.5)
        assert again[0] == (0, 5) and again[-1] == (5, 5)
        # one result.json deleted: one regrade
        next((workdir / "results/default" / name / "attempts").glob("*/1/result.json")).unlink()
        once = run(0.5)
        assert once[0] == (0, 1) and once[-1] == (1, 1)


def test_the_summary_line_shows_calls_tokens_and_cost_when_metrics_have_them(tmp_path: Path):
    outcome = RequestOutcome(name="r", key="default/r", state="completed", counts={"completed": 4},
                             metrics={"accuracy": 0.5}, results_dir=str(tmp_path))
    (tmp_path / "metrics.json").write_text(json.dumps({"summary": {"overall": {
        "attempts": 4, "calls": 8, "prompt_tokens": 12000, "completion_tokens": 345, "cost_usd": 0.0421}}}))
    assert _outcome_line(outcome) == (f"r: completed: 4 attempts; accuracy 0.5; 8 model calls, 12,345 tokens "
                                      f"(12,000 in, 345 out), $0.0421 -> {tmp_path}/metrics.json")
    # a summary without cost (no pricing) or without the summary at all: only what is there
    (tmp_path / "metrics.json").write_text(json.dumps({"summary": {"overall": {"calls": 1, "cost_usd": None}}}))
    assert "; 1 model call -> " in _outcome_line(outcome)
    (tmp_path / "metrics.json").write_text(json.dumps({"metrics": {"accuracy": 0.5}}))
    assert _outcome_line(outcome) == f"r: completed: 4 attempts; accuracy 0.5 -> {tmp_path}/metrics.json"
    outcome.state, outcome.errors, outcome.counts = "completed_with_errors", {"run_error: boom": 1}, {
        "completed": 3, "run_error": 1}
    (tmp_path / "metrics.json").write_text(json.dumps({"summary": {"overall": {"prompt_tokens": 7}}}))
    assert _outcome_line(outcome).endswith("(run_error: boom x1); accuracy 0.5; 7 tokens (7 in) -> "
                                           f"{tmp_path}/metrics.json")


def test_no_progress_line_when_not_a_terminal(workdir: Path):
    done = snakemake(workdir)
    assert done.returncode == 0
    assert not re.search(r"attempts \(\d+%\)", done.stdout + done.stderr)
    assert "Finished jobid" in done.stderr
