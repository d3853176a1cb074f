"""Flags beside the figures: what the transcript scanners flagged, in metrics.json, the run's last line, `runs`,
`compare --exclude-flagged` and `--fail-on-flag`, never changing a score."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from conftest import agentcompass, jobs_run, jobs_run_with_shards, shard_logs

from agentcompass.testing.endpoint import ScriptedEndpoint, completion

REFUSAL = "I'm sorry, I can't help with that."
ANSWERS = {"France": "Paris", "Japan": "Tokyo"}
ATTEMPT_JOBS = ("prepare", "run", "evaluate")


def answer(refuse: str | None):
    """The endpoint's handler: the right city for the task's prompt, or a refusal for the country ``refuse``."""

    def reply(body: dict) -> tuple[int, dict]:
        prompt = json.dumps(body.get("messages"))
        country = next(c for c in ANSWERS if c in prompt)
        return 200, completion(REFUSAL if country == refuse else ANSWERS[country])

    return reply


def run_args(endpoint: ScriptedEndpoint, run_id: str) -> tuple[str, ...]:
    return ("run", "example_exact_match", "chat", "scripted", "--base-url", endpoint.base_url, "-b", "limit=2",
            "--run-id", run_id, "--scanner", "gave_up")


def last_line(done) -> str:
    return done.stdout.strip().splitlines()[-1]


def test_flags_stand_beside_the_figures_in_metrics_the_last_line_runs_compare_and_the_exit_status(workdir: Path):
    with ScriptedEndpoint(reply=answer(refuse="Japan")) as endpoint:
        first = agentcompass(workdir, *run_args(endpoint, "refusing"))
        assert first.returncode == 0, first.stderr[-3000:]
        # the figures with the flagged attempt stay where they are; those without it stand beside them
        metrics = json.loads((workdir / "results/default/refusing/metrics.json").read_text())
        assert metrics["metrics"]["accuracy"] == 0.5 and metrics["summary"]["overall"]["accuracy"] == 0.5
        flags = metrics["flags"]
        assert (flags["scanned"], flags["flagged"]) == (2, 1)
        assert flags["scanners"] == {"gave_up": {"category": "gave_up", "flagged": 1, "errors": 0}}
        assert flags["categories"] == {"gave_up": 1}
        assert flags["unflagged"]["metrics"]["accuracy"] == 1.0
        overall = flags["unflagged"]["summary"]["overall"]
        assert (overall["attempts"], overall["counted"], overall["accuracy"]) == (1, 1, 1.0)
        assert "flags" not in json.loads((workdir / "results/default/refusing/attempts/capital-japan/1/result.json")
                                         .read_text())
        assert "; 1 flagged (gave_up 1)" in last_line(first), first.stdout

        # the same command with --fail-on-flag: nothing to build, and the flag is the exit status
        failing = agentcompass(workdir, *run_args(endpoint, "refusing"), "--fail-on-flag")
        assert failing.returncode == 6, failing.stdout + failing.stderr[-3000:]
        assert not jobs_run(failing.stderr)
        assert "1 attempt(s) flagged" in last_line(failing) and "--fail-on-flag" in last_line(failing)

        listed = agentcompass(workdir, "runs", "--json")
        assert listed.returncode == 0, listed.stderr
        [run] = json.loads(listed.stdout)
        assert (run["flagged"], run["flagged_by"]) == (1, {"gave_up": 1})
        header, line = agentcompass(workdir, "runs").stdout.splitlines()
        assert line[header.index("flagged"):].split()[0] == "1"  # the columns are aligned

    with ScriptedEndpoint(reply=answer(refuse=None)) as endpoint:
        second = agentcompass(workdir, *run_args(endpoint, "answering"))
        assert second.returncode == 0, second.stderr[-3000:]
        assert "; 0 flagged (gave_up 0)" in last_line(second)
        assert agentcompass(workdir, *run_args(endpoint, "answering"), "--fail-on-flag").returncode == 0

    runs = ("results/default/refusing", "results/default/answering")
    plain = agentcompass(workdir, "compare", *runs, "--json")
    assert plain.returncode == 0, plain.stderr
    [pair] = json.loads(plain.stdout)["comparisons"]
    assert pair["paired"] == 2 and "flagged" not in pair  # without the option nothing changes
    page = workdir / "compare.html"
    clean = agentcompass(workdir, "compare", *runs, "--exclude-flagged", "--html", str(page))
    assert clean.returncode == 0, clean.stderr
    paired = next(line for line in clean.stdout.splitlines() if line.startswith("paired:"))
    assert paired.startswith("paired: 1 attempt(s)") and "left out: 1 flagged by a scanner" in paired
    assert "left out: 1 flagged by a scanner" in page.read_text()
    [pair] = json.loads(agentcompass(workdir, "compare", *runs, "--exclude-flagged", "--json").stdout)["comparisons"]
    assert (pair["paired"], pair["flagged"], pair["unscanned"]) == (1, 1, 0)
    accuracy = next(m for m in pair["metrics"] if m["name"] == "accuracy")
    assert (accuracy["a"], accuracy["b"]) == (1.0, 1.0)  # capital-france alone: right in both


def test_scanners_added_and_removed_rebuild_the_metrics_alone(workdir: Path):
    args = ("run", "example_exact_match", "oracle", "none", "-b", "limit=2")
    first = agentcompass(workdir, *args)
    assert first.returncode == 0, first.stderr[-3000:]
    metrics_file = workdir / "results/default/example_exact_match-oracle-none/metrics.json"
    unscanned = metrics_file.read_bytes()
    assert b'"flags"' not in unscanned and "flagged" not in last_line(first)

    # options that need scanners, on a run without: a clear error before any work
    refused = agentcompass(workdir, *args, "--fail-on-flag")
    assert refused.returncode == 2 and "--fail-on-flag" in refused.stderr and "--scanner" in refused.stderr
    run = str(metrics_file.parent)
    compared = agentcompass(workdir, "compare", run, run, "--exclude-flagged")
    assert compared.returncode == 2, compared.stdout
    assert "run A" in compared.stderr and "was not scanned" in compared.stderr
    assert "--scanner ID" in compared.stderr and "drop --exclude-flagged" in compared.stderr
    listed = json.loads(agentcompass(workdir, "runs", "--json").stdout)
    assert [(r["flagged"], r["flagged_by"]) for r in listed] == [(None, None)]

    scanned = agentcompass(workdir, *args, "--scanner", "gave_up")
    assert scanned.returncode == 0, scanned.stderr[-3000:]
    ran = jobs_run(scanned.stderr)
    assert ran.get("scan") == 2 and ran.get("metrics") == 1 and not any(ran.get(n) for n in ATTEMPT_JOBS), ran
    flags = json.loads(metrics_file.read_text())["flags"]
    assert (flags["scanned"], flags["flagged"]) == (2, 0) and flags["unflagged"]["metrics"]["accuracy"] == 1.0
    assert "; 0 flagged (gave_up 0)" in last_line(scanned)

    # scanners removed: metrics.json is again what it was, byte for byte
    removed = agentcompass(workdir, *args)
    assert removed.returncode == 0, removed.stderr[-3000:]
    ran = jobs_run(removed.stderr)
    assert ran.get("metrics") == 1 and not any(ran.get(n) for n in (*ATTEMPT_JOBS, "scan")), ran
    assert metrics_file.read_bytes() == unscanned


def test_a_request_built_in_shards_counts_its_flags_and_a_new_scanner_rebuilds_its_metrics(workdir: Path):
    """A sharded request's metrics.json reads its shards' records, which are rewritten when their scans are."""
    def config(*scanners: str) -> str:
        path = workdir / f"{len(scanners)}.yaml"
        path.write_text(yaml.safe_dump({"runtime": {"shard_size": 1}, "requests": {"sharded": {
            "benchmark": {"id": "example_exact_match", "params": {"limit": 2}}, "harness": "oracle",
            "model": {"id": "none"}, "scanners": list(scanners)}}}))
        return str(path)

    first = agentcompass(workdir, "run", "-c", config("gave_up"))
    assert first.returncode == 0, first.stderr[-3000:]
    metrics_file = workdir / "results/default/sharded/metrics.json"
    assert list(json.loads(metrics_file.read_text())["flags"]["scanners"]) == ["gave_up"]
    before = shard_logs(workdir)
    more = agentcompass(workdir, "run", "-c", config("gave_up", "network"))
    assert more.returncode == 0, more.stderr[-3000:]
    ran = jobs_run_with_shards(workdir, more.stderr, before)
    assert ran.get("scan") == 2 and ran.get("metrics") == 1 and not any(ran.get(n) for n in ATTEMPT_JOBS), ran
    flags = json.loads(metrics_file.read_text())["flags"]
    assert sorted(flags["scanners"]) == ["gave_up", "network"] and (flags["scanned"], flags["flagged"]) == (2, 0)
    assert "; 0 flagged (gave_up 0, network 0)" in last_line(more)
