"""Every runtime setting the config documents does what it says, with and without shards.

(deadline_seconds, cleanup_grace_seconds and environment_open_rate are in test_stopping.py.)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentcompass.testing.endpoint import Reply, ScriptedEndpoint, completion
from conftest import announced, clean_env


def write_config(workdir: Path, endpoint, runtime: dict | None = None, execution: dict | None = None,
                 top: dict | None = None, tasks: int = 8) -> Path:
    path = workdir / "eval.yaml"
    request = {"benchmark": "synthetic", "harness": "chat", "model": {"id": "scripted", "base_url": endpoint.base_url}}
    if execution:
        request["execution"] = execution
    path.write_text(json.dumps({
        "runtime": {"progress": False, **(runtime or {})},
        "requests": {"settings": request},
        "benchmarks": {"synthetic": {"num_tasks": tasks}},
        **(top or {}),
    }))
    return path


def run(workdir: Path, config: Path, cores: int = 8) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentcompass.cli", "run", "-c", str(config), "--cores", str(cores)],
                          cwd=workdir, env=clean_env(), capture_output=True, text=True, timeout=600)


SLOW = lambda body: Reply(200, completion("x"), delay=0.4)  # noqa: E731


# 8 attempts: with shards of 4, two shards (each one's claim is the whole cap, so one runs at a time)
@pytest.mark.parametrize("shard_size", [0, 4], ids=["attempt-jobs", "shards-of-4"])
@pytest.mark.parametrize("where", ["execution", "global"])
def test_task_concurrency_caps_the_attempts_running_at_once(workdir: Path, shard_size: int, where: str):
    with ScriptedEndpoint(SLOW) as endpoint:
        if where == "execution":
            config = write_config(workdir, endpoint, {"shard_size": shard_size}, execution={"task_concurrency": 2})
        else:
            config = write_config(workdir, endpoint, {"shard_size": shard_size}, top={"task_concurrency": 2})
        done = run(workdir, config, cores=8)
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(endpoint.requests) == 8
        assert endpoint.max_in_flight == 2  # --cores 8 alone lets 8 run at once (next test)


def test_without_a_cap_cores_decide(workdir: Path):
    with ScriptedEndpoint(SLOW) as endpoint:
        done = run(workdir, write_config(workdir, endpoint), cores=8)
        assert done.returncode == 0, done.stderr[-3000:]
        assert endpoint.max_in_flight > 2


@pytest.mark.parametrize("shard_size", [0, 2], ids=["attempt-jobs", "shards-of-2"])
def test_provider_limits_cap_the_sessions_of_an_environment(workdir: Path, shard_size: int):
    # every attempt job of this request may open a host_process session: one at a time. 4 attempts
    # (two shards of 2) would all run at once without the limit, as the second run shows
    with ScriptedEndpoint(SLOW) as endpoint:
        config = write_config(workdir, endpoint, {"shard_size": shard_size, "provider_limits": {"host_process": 1}},
                              tasks=4)
        done = run(workdir, config, cores=8)
        assert done.returncode == 0, done.stderr[-3000:]
        assert endpoint.max_in_flight == 1
    with ScriptedEndpoint(SLOW) as endpoint:  # a limit on another provider leaves this one alone
        (workdir / "results").rename(workdir / "results-before")
        config = write_config(workdir, endpoint, {"shard_size": shard_size, "provider_limits": {"docker": 1}}, tasks=4)
        done = run(workdir, config, cores=8)
        assert done.returncode == 0, done.stderr[-3000:]
        assert endpoint.max_in_flight > 1


@pytest.mark.parametrize("level,shown", [("info", False), ("debug", True)])
def test_a_shards_log_announces_its_jobs_only_at_debug(workdir: Path, level: str, shown: bool):
    with ScriptedEndpoint(lambda body: completion("x")) as endpoint:
        done = run(workdir, write_config(workdir, endpoint, {"log_level": level, "shard_size": 2}, tasks=4))
        assert done.returncode == 0, done.stderr[-3000:]
    logs = sorted(workdir.glob("results/*/settings/shards/*/shard.log"))
    assert len(logs) == 2
    for log in logs:
        text = log.read_text()
        assert len(re.findall(r"^Finished jobid: \d+ \(Rule: run\)", text, re.M)) == 2  # always
        assert ("run" in announced(text)) is shown


@pytest.mark.parametrize("level,shown,hidden", [
    ("warning", [], ["rule run:", "Finished jobid", "started"]),
    ("info", ["rule run:", "Finished jobid"], ["agentcompass: run "]),
    ("debug", ["rule run:", "agentcompass: run ns=default run_id=settings task=t0 attempt=1: started"], []),
])
def test_log_level_sets_what_the_console_shows(workdir: Path, level: str, shown: list[str], hidden: list[str]):
    with ScriptedEndpoint(lambda body: completion("x")) as endpoint:
        done = run(workdir, write_config(workdir, endpoint, {"log_level": level}, tasks=2))
        assert done.returncode == 0, done.stderr[-3000:]
        for text in shown:
            assert text in done.stderr, (level, text)
        for text in hidden:
            assert text not in done.stderr, (level, text)
        assert "settings: completed: 2 attempts" in done.stdout  # the outcome is not a log line
