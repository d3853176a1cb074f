"""The scan stage: with scanners selected, every attempt gets scan.json beside its result; a scanner added to a
finished run rescans every attempt and reruns nothing else (no run, no evaluation, no model call)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from conftest import agentcompass, jobs_run, jobs_run_with_shards, shard_logs

from agentcompass.plugins import load_builtin_components
from agentcompass.runtime.registry import SCANNERS
from agentcompass.testing.endpoint import ScriptedEndpoint, completion

load_builtin_components()  # the registries, as the CLI fills them

ATTEMPT_JOBS = ("prepare", "run", "evaluate")


def findings(folder: Path) -> dict[str, dict]:
    scan = json.loads((folder / "scan.json").read_text())
    assert scan["task_id"] == folder.parent.name and scan["attempt"] == 1
    assert scan["flagged"] == any(f["flagged"] for f in scan["scanners"])
    return {f["id"]: f for f in scan["scanners"]}


def test_a_scanner_added_to_a_finished_run_rescans_every_attempt_and_calls_no_model(workdir: Path):
    with ScriptedEndpoint(lambda body: (200, completion("Paris"))) as endpoint:
        args = ("run", "example_exact_match", "chat", "scripted", "--base-url", endpoint.base_url, "-b", "limit=2")
        first = agentcompass(workdir, *args, "--scanner", "gave_up")
        assert first.returncode == 0, first.stderr[-3000:]
        assert jobs_run(first.stderr).get("scan") == 2
        attempts = sorted(workdir.glob("results/*/*/attempts/*/*"))
        assert len(attempts) == 2 and len(endpoint.requests) == 2
        for folder in attempts:
            found = findings(folder)
            assert list(found) == ["gave_up"]
            assert found["gave_up"]["flagged"] is False and found["gave_up"]["category"] == "gave_up"
            assert found["gave_up"]["version"] == SCANNERS.get("gave_up").version and found["gave_up"]["error"] is None

        # the same request again: nothing to do
        again = agentcompass(workdir, *args, "--scanner", "gave_up")
        assert again.returncode == 0, again.stderr[-3000:]
        assert "scan" not in jobs_run(again.stderr)

        # status names the scan files a new scanner rebuilds
        status = agentcompass(workdir, "status", *args[1:], "--scanner", "gave_up", "--scanner", "network")
        assert status.returncode == 0, status.stderr[-3000:]
        assert "scan.json" in status.stdout

        # a second scanner: every attempt rescanned, nothing of the attempts rerun, the model never called
        more = agentcompass(workdir, *args, "--scanner", "gave_up", "--scanner", "network")
        assert more.returncode == 0, more.stderr[-3000:]
        ran = jobs_run(more.stderr)
        assert ran.get("scan") == 2 and not any(ran.get(name) for name in ATTEMPT_JOBS), ran
        assert len(endpoint.requests) == 2
        for folder in attempts:
            assert list(findings(folder)) == ["gave_up", "network"]
            result = json.loads((folder / "result.json").read_text())
            assert "scan" not in json.dumps(result)  # the score is untouched: a flag stands beside it


def test_a_request_built_in_shards_scans_in_its_shards_and_a_new_scanner_reruns_only_the_scans(workdir: Path):
    def config(*scanners: str) -> str:
        path = workdir / f"{len(scanners)}.yaml"
        path.write_text(yaml.safe_dump({"runtime": {"shard_size": 1}, "requests": {"sharded": {
            "benchmark": {"id": "example_exact_match", "params": {"limit": 2}}, "harness": "oracle",
            "model": {"id": "none"}, "scanners": list(scanners)}}}))
        return str(path)

    first = agentcompass(workdir, "run", "-c", config("gave_up"))
    assert first.returncode == 0, first.stderr[-3000:]
    assert len(shard_logs(workdir)) == 2
    attempts = sorted(workdir.glob("results/default/sharded/attempts/*/*"))
    assert len(attempts) == 2 and all(list(findings(folder)) == ["gave_up"] for folder in attempts)
    before = shard_logs(workdir)
    more = agentcompass(workdir, "run", "-c", config("gave_up", "network"))
    assert more.returncode == 0, more.stderr[-3000:]
    ran = jobs_run_with_shards(workdir, more.stderr, before)
    assert ran.get("scan") == 2 and not any(ran.get(name) for name in ATTEMPT_JOBS), ran
    assert all(list(findings(folder)) == ["gave_up", "network"] for folder in attempts)


def test_a_request_without_scanners_has_no_scan_stage(workdir: Path):
    done = agentcompass(workdir, "run", "example_exact_match", "oracle", "none", "-b", "limit=1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "scan" not in jobs_run(done.stderr)
    assert not list(workdir.glob("results/*/*/attempts/*/*/scan.json"))
    request = json.loads(next(workdir.glob("results/*/*/request.json")).read_text())
    assert "scanners" not in request


def test_an_unknown_scanner_fails_before_any_job(workdir: Path):
    done = agentcompass(workdir, "run", "example_exact_match", "oracle", "none", "--scanner", "mind_reader")
    assert done.returncode != 0
    assert "unknown scanner id 'mind_reader'" in done.stderr and "agentcompass list scanner" in done.stderr
    assert not list(workdir.glob("results/*/*/attempts"))
