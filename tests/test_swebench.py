"""``swebench`` through the real workflow on the real Docker engine, graded by the real swebench package.

A small SWE-bench-format instance set is built here (tests/swebench_kit.py:
a git repository of a Python project with a bug, in an image made from a
local base, its instances as swebench 5 describes them). The oracle
resolves every instance; wrong answers are unresolved; each verdict is
``get_eval_report`` run directly on the same log; a missing image is that
attempt's infrastructure failure naming it and how to fetch it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import swebench_kit as kit
from agentcompass.benchmarks.swebench import DEPENDENCY
from agentcompass.testing.dependencies import needs
from conftest import clean_env, snakemake

pytestmark = needs(DEPENDENCY)

PATCH_DRIVER = Path(__file__).parent / "drivers" / "patch_agent_workflow.py"
GOOD = {"demo__calc-1": ("add", "demo_1776_calc-1"), "demo__calc-2": ("neg", "demo_1776_calc-2")}
MISSING = "demo__calc-3"
OOM = "demo__calc-1-oom"
BAD = ["empty", "wrong", "delete-tests", "exit-early", "leftover"]
LINKED = "linked-diff"
# an agent that changes nothing and leaves a process swapping the diff's file for a link to an endless device
LINKER = ("mkdir -p /tmp/agentcompass-swebench; (i=0; while [ $i -lt 200000 ]; do "
          "ln -sfn /dev/zero /tmp/agentcompass-swebench/model.patch; i=$((i+1)); done) >/dev/null 2>&1 &")


@pytest.fixture(scope="module")
def instances(tmp_path_factory, needs_docker) -> dict:
    """The instances (by id), their file, and the bad patches; the images built (removed after the module)."""
    root = tmp_path_factory.mktemp("swebench")
    base, made = kit.build_repo(root / "repo")
    images = [kit.build_instance_image(root / "repo", image_id) for _, image_id in GOOD.values()]
    rows = {iid: kit.instance(iid, base, made["instances"][key], image_id) for iid, (key, image_id) in GOOD.items()}
    rows[MISSING] = kit.instance(MISSING, base, made["instances"]["add"], "demo_1776_calc-3")
    # its test runner fails as a machine without memory does: the package's advice is a broken environment
    oom = kit.instance(OOM, base, made["instances"]["add"], "demo_1776_calc-1")
    oom["eval_script"] = oom["eval_script"].replace("python -m pytest", "echo 'Cannot allocate memory' >&2; false")
    rows[OOM] = oom
    for name in [*BAD, "gold", LINKED]:  # each bad patch an instance of its own, all in calc-1's image
        rows[f"demo__calc-1-{name}"] = kit.instance(f"demo__calc-1-{name}", base, made["instances"]["add"],
                                                     "demo_1776_calc-1")
    path = root / "instances.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows.values()))
    patches = {f"demo__calc-1-{name}": made["bad"][name] for name in BAD}
    patches["demo__calc-1-gold"] = made["instances"]["add"]["patch"]
    # the gold fix, and a conftest that keeps the test runner busy for a minute
    sleeper = made["instances"]["add"]["patch"] + made["bad"]["sleep"]
    yield {"rows": rows, "path": path, "patches": patches, "sleeper": sleeper, "scripts": {f"demo__calc-1-{LINKED}": LINKER}}
    subprocess.run(["docker", "rmi", "-f", *images], capture_output=True)


def write_config(workdir: Path, instances: dict, harness, ids: list[str], name: str = "swe", params: dict | None = None,
                 **extra) -> Path:
    config = {"requests": {name: {
        "benchmark": {"id": "swebench", "params": {
            "path": str(instances["path"]), "instance_ids": ids,
            "image_namespace": kit.INSTANCE_NAMESPACE, "image_tag": kit.INSTANCE_TAG, "eval_timeout": 120,
            **(params or {})}},
        "harness": harness,
        "model": {"id": "none"},
        "environment": {"id": "docker"},
        **extra,
    }}}
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def attempt(workdir: Path, iid: str, name: str = "swe") -> Path:
    return workdir / "results" / "default" / name / "attempts" / iid / "1"


def result_of(workdir: Path, iid: str, name: str = "swe") -> dict:
    return json.loads((attempt(workdir, iid, name) / "result.json").read_text())


def graded_directly(tmp_path: Path, instance: dict, result: dict) -> dict:
    """The package's report of the log the attempt kept, for the patch it applied."""
    from swebench.harness.grading import get_eval_report
    from swebench.harness.utils import make_test_spec

    log = tmp_path / f"{instance['instance_id']}.log"
    log.write_text(result["metadata"]["swebench"]["test_output"])
    prediction = {"instance_id": instance["instance_id"], "model_name_or_path": "x", "model_patch": result["answer"]}
    return get_eval_report(make_test_spec(instance), prediction, str(log), include_tests_status=True)[instance["instance_id"]]


def test_the_oracle_resolves_every_instance_and_a_missing_image_is_infrastructure(instances, tmp_path, workdir):
    ids = [*GOOD, MISSING, OOM]
    done = snakemake(workdir, "--configfile", str(write_config(workdir, instances, "oracle", ids)))
    assert done.returncode == 0, done.stderr[-4000:]
    for iid in GOOD:
        result = result_of(workdir, iid)
        assert result["status"] == "completed", result["error"]
        assert result["score"] == 1.0 and result["correct"] is True, result["metadata"]["swebench"]["report"]
        verdict = result["metadata"]["swebench"]
        assert verdict["report"] == graded_directly(tmp_path, instances["rows"][iid], result)
        assert verdict["report"]["tests_status"]["FAIL_TO_PASS"]["success"] == json.loads(
            instances["rows"][iid]["FAIL_TO_PASS"])
        assert verdict["report"]["infra_failure"] is False
        assert verdict["test_statuses"]["tests/test_calc.py::test_mul"] == "PASSED"
        # the answer is the diff the oracle's gold patch left (a new file too, for calc-2)
        assert result["answer"].strip() and "diff --git" in result["answer"]
        plan = json.loads((attempt(workdir, iid) / "plan.json").read_text())
        image = kit.local_image(GOOD[iid][1])
        assert plan["task_environment"]["params"]["image"] == image
        assert plan["evaluation_environment"]["params"]["image"] == image
        assert plan["task_environment"]["params"]["workdir"] == "/testbed"
        assert plan["run_network"]["mode"] == "none" and plan["evaluation_network"]["mode"] == "none"
        assert plan["applied_recipes"] == ["swebench_verified"]
        prepared = (attempt(workdir, iid) / "prepared.json").read_text()
        row = instances["rows"][iid]
        assert row["patch"] not in prepared and row["test_patch"] not in prepared  # ground truth never reaches the agent
    # the package reads its log as a machine without memory: advice kept in the report of a completed,
    # unresolved attempt (the tests' output is the patch's to choose), never an infrastructure failure
    broken = result_of(workdir, OOM)
    assert broken["status"] == "completed" and broken.get("failure_class") is None, broken
    assert broken["score"] == 0.0 and broken["correct"] is False
    assert broken["metadata"]["swebench"]["report"]["infra_failure"] is True
    assert broken["metadata"]["swebench"]["report"]["infra_failure_reason"] == "out_of_memory"
    assert broken["metadata"]["swebench"]["report"] == graded_directly(tmp_path, instances["rows"][OOM], broken)
    missing = result_of(workdir, MISSING)
    assert missing["status"] == "run_error" and missing["failure_class"] == "infrastructure", missing
    assert kit.local_image("demo_1776_calc-3") in missing["error"] and "docker pull" in missing["error"]
    # no figure blames the model for the missing image: 2 of the 3 instances scored are resolved
    metrics = json.loads((workdir / "results" / "default" / "swe" / "metrics.json").read_text())
    assert metrics["metrics"]["accuracy"] == metrics["summary"]["overall"]["accuracy"] == pytest.approx(2 / 3)
    assert (metrics["scored_on"]["scored"], metrics["scored_on"]["tasks"], metrics["scored_on"]["infrastructure"]) == (
        3, 4, 1)


def test_wrong_answers_are_unresolved_exactly_as_the_package_grades_them(instances, tmp_path, workdir):
    ids = sorted([*instances["patches"], *instances["scripts"]])
    config = write_config(workdir, instances, {"id": "test_patch_agent", "params": {
        "patches": instances["patches"], "scripts": instances["scripts"]}}, ids)
    done = subprocess.run([sys.executable, str(PATCH_DRIVER), str(workdir), str(config)], cwd=workdir,
                          env=clean_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    for iid in ids:
        result = result_of(workdir, iid)
        assert result["status"] == "completed", (iid, result["error"], result["metadata"].get("model_patch"))
        report = result["metadata"]["swebench"]["report"]
        assert report == graded_directly(tmp_path, instances["rows"][iid], result), iid
        expected = iid.endswith("-gold")
        assert result["correct"] is expected and result["score"] == float(expected), (iid, report)
        assert report["resolved"] is expected
    # what tells them apart: the empty and wrong patches ran the tests and failed test_add; the runner that
    # exited early printed PASSED lines, but its exit status gave it away (no status map at all)
    empty = result_of(workdir, "demo__calc-1-empty")
    assert empty["answer"] == "" and empty["metadata"]["swebench"]["report"]["tests_status"]["FAIL_TO_PASS"]["failure"]
    early = result_of(workdir, "demo__calc-1-exit-early")["metadata"]["swebench"]
    assert "PASSED tests/test_calc.py::test_add" in early["test_output"]
    assert early["report"]["patch_successfully_applied"] is False and "tests_status" not in early["report"]
    deleted = result_of(workdir, "demo__calc-1-delete-tests")
    assert "deleted file mode" in deleted["answer"]


def test_a_diff_larger_than_max_patch_bytes_is_never_applied(instances, workdir):
    """The diff is the agent's: beyond the limit it is not copied out, read into memory nor applied, and counts
    as no patch."""
    gold = instances["patches"]["demo__calc-1-gold"]
    config = write_config(workdir, instances, {"id": "test_patch_agent", "params": {"patches": instances["patches"]}},
                          ["demo__calc-1-gold"], name="small", params={"max_patch_bytes": len(gold.encode()) - 1})
    done = subprocess.run([sys.executable, str(PATCH_DRIVER), str(workdir), str(config)], cwd=workdir,
                          env=clean_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    result = result_of(workdir, "demo__calc-1-gold", "small")
    assert result["status"] == "completed" and result["score"] == 0.0 and result["answer"] is None, result
    refused = result["metadata"]["model_patch"]["refused"]
    assert "more than max_patch_bytes" in refused and "not copied" in refused  # measured in the container first
    assert result["metadata"]["swebench"]["report"]["patch_is_None"] is True
    assert result["metadata"]["swebench"]["test_output"] == ""  # no container ran the tests


def test_tests_that_outrun_eval_timeout_are_graded_as_the_package_grades_a_timeout(instances, tmp_path, workdir):
    sleeper = instances["sleeper"]
    config = write_config(workdir, instances, {"id": "test_patch_agent", "params": {
        "patches": {"demo__calc-1-gold": sleeper}}}, ["demo__calc-1-gold"], name="slow", params={"eval_timeout": 3})
    done = subprocess.run([sys.executable, str(PATCH_DRIVER), str(workdir), str(config)], cwd=workdir,
                          env=clean_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    result = result_of(workdir, "demo__calc-1-gold", "slow")
    verdict = result["metadata"]["swebench"]
    assert result["status"] == "completed" and result["score"] == 0.0, result
    assert verdict["test_output"].endswith("Timeout error: 3 seconds exceeded.")
    assert verdict["report"]["infra_failure_reason"] == "tests_timed_out" and verdict["report"]["infra_failure"] is False
    assert verdict["report"] == graded_directly(tmp_path, instances["rows"]["demo__calc-1-gold"], result)


def test_a_scripted_tool_agent_that_edits_as_the_gold_patch_resolves_the_instance(instances, workdir):
    from agentcompass.testing.endpoint import ScriptedEndpoint, tool_call_reply

    def model(body):
        step = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if step == 0:
            assert "add(2, 3) returns -1" in body["messages"][-1]["content"]  # the problem statement
            return tool_call_reply("bash", {"command": "sed -i 's/a - b/a + b/' calc.py && git diff --stat"},
                                   call_id="c1")
        return tool_call_reply("submit", {"answer": "fixed add"}, call_id="c2")

    with ScriptedEndpoint(model) as endpoint:
        path = write_config(workdir, instances, "tool_agent", ["demo__calc-1"], name="agent")
        config = yaml.safe_load(path.read_text())
        config["requests"]["agent"]["model"] = {"id": "scripted", "base_url": endpoint.base_url}
        path.write_text(yaml.safe_dump(config))
        done = snakemake(workdir, "--configfile", str(path))
    assert done.returncode == 0, done.stderr[-4000:]
    result = result_of(workdir, "demo__calc-1", "agent")
    assert result["status"] == "completed", result["error"]
    assert result["score"] == 1.0 and result["correct"] is True, result["metadata"]["swebench"]["report"]
    assert result["metadata"]["harness_answer"] == "fixed add"
    assert "-    return a - b\n+    return a + b" in result["answer"]
    assert "calc.py" in endpoint.requests[1].body["messages"][-1]["content"]  # the agent's command ran in /testbed


def test_oracle_preflight_quarantines_the_instance_whose_image_is_missing(instances, workdir):
    config = write_config(workdir, instances, {"id": "test_patch_agent", "params": {"patches": {}}},
                          ["demo__calc-1", MISSING], name="vetted", execution={"preflight": "oracle"})
    done = subprocess.run([sys.executable, str(PATCH_DRIVER), str(workdir), str(config)], cwd=workdir,
                          env=clean_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    healthy, broken = result_of(workdir, "demo__calc-1", "vetted"), result_of(workdir, MISSING, "vetted")
    assert healthy["status"] == "completed" and healthy["score"] == 0.0  # vetted, then the empty answer is graded
    assert broken["status"] == "skipped" and broken["error_stage"] == "preflight", broken
