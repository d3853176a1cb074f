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
from pathlib import Path

import pytest

from conftest import ROOT, clean_env

from agentcompass import layout
from agentcompass.pipeline.files import AttemptStarted
from agentcompass.stages import ATTEMPT, REQUEST, SHARD, STAGES, STARTING_STAGES, SUMMARY, TASK, stage

RESULTS = "results"
FOLDER = {REQUEST: layout.RUN_PATTERN, SUMMARY: layout.RUN_PATTERN, ATTEMPT: layout.ATTEMPT_PATTERN,
          SHARD: layout.SHARD_PATTERN, TASK: layout.PREFLIGHT_PATTERN}
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
    folder = f"{RESULTS}/{FOLDER[s.scope]}"
    assert [_plain(o) for o in rule["output"]] == layout.files_in(folder, s)
    if rule["output_names"]:
        assert rule["output_names"] == [o.name for o in s.outputs]
    else:
        assert len(s.outputs) == 1, f"{name}: name the rule's outputs as the table does"
    assert [_plain(x) for x in rule["log"]] == [layout.log_file(folder, s)]


@pytest.mark.parametrize("name", [s.name for s in STAGES])
def test_a_stage_s_rule_reads_its_inputs_and_records_its_params(rules, name):
    s, rule = stage(name), rules[name]
    folder = f"{RESULTS}/{FOLDER[s.scope]}"
    expected = {}
    for input_name, source, output in s.inputs:
        assert source in s.built_from, f"{name}: {source} is an input, so it is built from it"
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
    allowed = AttemptStarted.__dataclass_fields__["stage"].type
    assert all(repr(name) in str(allowed) for name in STARTING_STAGES), allowed


def test_the_rules_folder_holds_a_rule_file_per_stage_and_nothing_else():
    files = {p.stem for p in (ROOT / "rules").glob("*.smk")} - {"common"}
    assert files == {s.name for s in STAGES}


def test_an_unknown_stage_is_named_with_the_stages_there_are():
    with pytest.raises(KeyError, match="the stages are request, tasks"):
        stage("usage")
    assert isinstance(Path(layout.file_in("x", "evaluate", "plan")), Path)
