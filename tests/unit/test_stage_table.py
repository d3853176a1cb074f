"""The stage table (agentcompass.stages) and the rules agree, both ways.

The workflow is loaded by the real Snakemake (a dry run of a Snakefile that
includes the project's and writes down every rule it defined), and each rule is
compared with its row: the same stage for every rule and the reverse, the
same outputs (paths, names, order), named inputs, log, params, checkpoint, and
the one entry point as its code.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import typing
from types import SimpleNamespace
from pathlib import Path

import pytest

from conftest import ROOT, clean_env

from agentcompass import layout
from agentcompass.pipeline import targets
from agentcompass.pipeline.files import AttemptStarted
from agentcompass.pipeline.workflow import EvaluationWorkflow
from agentcompass.stages import ONLY_ENV, SCOPE_ROWS, STAGES, STARTING_STAGES, TASK, Output, Stage, stage

RESULTS = "results"
ENTRY = "        EVAL.build(rule, wildcards, input, output, params, threads, resources, log)\n"

PROBE = """
include: {snakefile!r}
import json
def _strings(items):
    return {{k: str(v) for k, v in items.items() if isinstance(v, str)}}
json.dump({{r.name: {{"output": [str(o) for o in r.output], "output_names": list(r.output.keys()),
                     "input": _strings(r.input), "log": [str(x) for x in r.log],
                     "params": list(r.params.keys()), "checkpoint": r.is_checkpoint,
                     "code": r.run_func_src}} for r in workflow.rules}}, open("rules.json", "w"))
"""
CONFIG = """
requests:
  r:
    benchmark: {id: example_exact_match, params: {limit: 1}}
    harness: oracle
    model: {id: none}
"""


@pytest.fixture(scope="module")
def rules(tmp_path_factory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("stage-table")
    (folder / "Snakefile").write_text(PROBE.format(snakefile=str(ROOT / "Snakefile")))
    (folder / "config.yaml").write_text(CONFIG)
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--snakefile", "Snakefile",
                           "--configfile", "config.yaml"], cwd=folder, env=clean_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((folder / "rules.json").read_text())


def _plain(pattern: str) -> str:
    """A rule's path without its wildcards' constraints: ``{ns,[A-Z]+}`` -> ``{ns}``."""
    return re.sub(r"\{(\w+),[^}]*\}", r"{\1}", pattern)


def test_every_rule_is_a_stage_and_every_stage_has_its_rule(rules):
    assert set(rules) - {"all"} == {s.name for s in STAGES}


@pytest.mark.parametrize("name", [s.name for s in STAGES])
def test_a_stage_s_rule_writes_its_files_where_the_layout_says(rules, name):
    s, rule = stage(name), rules[name]
    folder = f"{RESULTS}/{layout.pattern_of(s)}"
    assert [_plain(o) for o in rule["output"]] == layout.files_in(folder, s)
    if rule["output_names"]:
        assert rule["output_names"] == [o.name for o in s.outputs]
    else:
        assert len(s.outputs) == 1, f"{name}: name the rule's outputs as the table does"
    assert [_plain(x) for x in rule["log"]] == [layout.log_file(folder, s)]


@pytest.mark.parametrize("name", [s.name for s in STAGES])
def test_a_stage_s_rule_reads_its_inputs_and_records_its_params(rules, name):
    s, rule = stage(name), rules[name]
    folder = f"{RESULTS}/{layout.pattern_of(s)}"
    expected = {}
    for input_name, source, output in s.inputs:
        assert source in s.built_from, f"{name}: {source} is an input, so it is built from it"
        if (input_name, source, output) not in s.conditional_inputs():  # those come from a function
            expected[input_name] = layout.file_in(folder, source, output)
    assert {k: _plain(v) for k, v in rule["input"].items()} == expected
    assert rule["params"] == list(s.params)
    assert rule["checkpoint"] == s.checkpoint
    # one entry point; what it was recorded as before is a different text
    assert rule["code"] == ENTRY
    assert ENTRY not in s.recorded_code


def test_every_row_names_functions_that_exist():
    for s in STAGES:
        assert callable(s.resolve("body")), s.name
        if s.fingerprint:
            assert callable(s.resolve("fingerprint")), s.name
        for source in s.built_from:
            assert stage(source).name == source


def test_the_attempt_started_event_names_the_stages_an_attempt_starts_from():
    allowed = typing.get_type_hints(AttemptStarted)["stage"]
    assert all(repr(name) in str(allowed) for name in STARTING_STAGES), allowed


def test_the_rules_folder_holds_a_rule_file_per_stage_and_nothing_else():
    files = {p.stem for p in (ROOT / "rules").glob("*.smk")} - {"common"}
    assert files == {s.name for s in STAGES}


def test_an_unknown_stage_is_named_with_the_stages_there_are():
    with pytest.raises(KeyError, match="the stages are request, tasks"):
        stage("usage")
    assert isinstance(Path(layout.file_in("x", "evaluate", "plan")), Path)


def test_every_scope_row_names_the_methods_that_list_its_instances_and_make_its_params():
    for row in SCOPE_ROWS:
        assert callable(getattr(targets.Targets, row.instances)), row.name
        assert callable(getattr(EvaluationWorkflow, row.params)), row.name


# a task stage of no setting (``when``) in a folder of its own, as a new per-task stage is
SIZES = Stage("sizes", TASK, "sizes/<task>.json", outputs=(Output("sizes", "{task}.json"),), folder="sizes")
ATTEMPTS = [("a", 1), ("a", 2), ("b", 1), ("b", 2)]


def _invocation(monkeypatch):
    """Targets over one request without preflight, built attempt by attempt, with ``SIZES`` in the table."""
    monkeypatch.setitem(targets.STAGES_OF, TASK, (*targets.STAGES_OF[TASK], SIZES))
    monkeypatch.delenv(ONLY_ENV, raising=False)
    req = SimpleNamespace(namespace="ns", run_id="r", execution=SimpleNamespace(preflight=None, attempts=2),
                          scanners=None)
    inv = SimpleNamespace(inner=None, runtime=SimpleNamespace(shard_size=0), snakemake=None, requests=[req],
                          run_path=lambda req: "R", begin=lambda: None, request=lambda w: req)
    found = targets.Targets(inv, SimpleNamespace(settled=lambda req: False))
    monkeypatch.setattr(found, "attempt_paths", lambda req: ATTEMPTS)
    return found, req


def test_a_task_stage_without_a_setting_is_built_for_every_task_in_its_own_folder(monkeypatch):
    found, req = _invocation(monkeypatch)
    files = found.of_request(req)
    assert [f for f in files if "/sizes/" in f or "/preflight/" in f] == ["R/sizes/a.json", "R/sizes/b.json"]
    assert files.index("R/sizes/b.json") < files.index("R/attempts/a/1/prepared.json")
    assert found.task_files(req, ATTEMPTS[2:]) == ["R/sizes/b.json"]
    assert layout.task_file("R", "a", SIZES) == "R/sizes/a.json"
    assert layout.log_file(f"{layout.RUN_PATTERN}/sizes", SIZES) == "{ns}/{run_id}/sizes/{task}.log"
    # prepare's conditional input (preflight) is not built without its setting
    assert found.inputs_of("prepare")(SimpleNamespace(ns="ns", run_id="r", task="a", attempt="1")) == {}


def test_the_recovery_judges_every_task_stage_s_files_with_their_params(monkeypatch):
    found, req = _invocation(monkeypatch)
    evaluation = EvaluationWorkflow.__new__(EvaluationWorkflow)
    evaluation.inv, evaluation.targets = found.inv, found
    evaluation.params = lambda name: {"depends": lambda w: (name, dict(w))}  # type: ignore[method-assign]
    monkeypatch.setattr(EvaluationWorkflow, "_attempts_on_disk", staticmethod(lambda req, run: ATTEMPTS))
    outputs = {o.path: (o.rule, o.params()) for o in evaluation._outputs()}
    assert outputs["R/sizes/b.json"] == ("sizes", (("sizes", {"ns": "ns", "run_id": "r", "task": "b"}),))
    assert outputs["R/attempts/b/2/output.json"] == (
        "run", (("run", {"ns": "ns", "run_id": "r", "task": "b", "attempt": "2"}),))
    assert outputs["R/request.json"] == ("request", (("request", {"ns": "ns", "run_id": "r"}),))
    assert not any("/preflight/" in path or path.endswith("/scan.json") for path in outputs)
