"""The swebench Benchmark without an engine: loading every file form, filters, image names, the Recipe's plan."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent))
import swebench_kit as kit  # noqa: E402

from agentcompass.benchmarks.swebench import DEPENDENCY, SwebenchBenchmark, SwebenchPlan, image_name  # noqa: E402
from agentcompass.testing.dependencies import needs  # noqa: E402
from agentcompass.environments import DockerEnvironment  # noqa: E402
from agentcompass.harnesses import OracleHarness  # noqa: E402
from agentcompass.runtime import Planner  # noqa: E402
from agentcompass.runtime.config import ConfigError  # noqa: E402
from agentcompass.runtime.models import (  # noqa: E402
    BenchmarkSpec, EnvironmentSpec, ExecutionSpec, HarnessSpec, ModelSpec, NetworkPolicy, RunMetadata, RunRequest,
)
from agentcompass.recipes.swebench_verified import SwebenchVerified  # noqa: E402
from agentcompass.runtime.registry import Registry  # noqa: E402

pytestmark = needs(DEPENDENCY)


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> list[dict]:
    base, made = kit.build_repo(tmp_path_factory.mktemp("repo") / "repo")
    return [kit.instance("demo__calc-1", base, made["instances"]["add"], "demo_1776_calc-1"),
            kit.instance("demo__calc-2", base, made["instances"]["neg"], "demo_1776_calc-2")]


def request(path: Path, environment: EnvironmentSpec | None = None, execution: ExecutionSpec | None = None,
            **params) -> RunRequest:
    return RunRequest(
        model=ModelSpec(), benchmark=BenchmarkSpec(id="swebench", params={"path": str(path), **params}),
        harness=HarnessSpec(id="oracle"), environment=environment or EnvironmentSpec(id="docker"),
        execution=execution or ExecutionSpec(), metadata=RunMetadata(request_name="r"),
    )


def load(path: Path, **params):
    return SwebenchBenchmark().load_tasks(request(path, **params))


def test_every_file_form_loads_the_same_tasks_and_keeps_the_ground_truth_apart(rows, tmp_path):
    import datasets
    import pandas

    jsonl = tmp_path / "i.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "i.json").write_text(json.dumps(rows))
    pandas.DataFrame(rows).to_parquet(tmp_path / "i.parquet")
    folder = tmp_path / "hub" / "data"
    folder.mkdir(parents=True)
    pandas.DataFrame(rows[:1]).to_parquet(folder / "test-00000-of-00001.parquet")
    pandas.DataFrame(rows[1:]).to_parquet(folder / "dev-00000-of-00001.parquet")
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "disk"))

    expected = load(jsonl)
    assert [t.task_id for t in expected] == ["demo__calc-1", "demo__calc-2"]
    for path in (tmp_path / "i.json", tmp_path / "i.parquet", tmp_path / "disk"):
        assert load(path) == expected, path
    assert [t.task_id for t in load(tmp_path / "hub", split="dev")] == ["demo__calc-2"]
    with pytest.raises(ValueError, match=r"holds the splits \['dev', 'test'\]; set the benchmark param split"):
        load(tmp_path / "hub")
    task = expected[0]
    assert task.question == rows[0]["problem_statement"] and task.category == "demo/calc"
    assert task.ground_truth == {k: rows[0][k] for k in ("patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS")}
    assert "patch" not in task.metadata["swebench"] and task.metadata["swebench"]["eval_script"] == rows[0]["eval_script"]
    assert [t.task_id for t in load(jsonl, instance_ids=["demo__calc-2"])] == ["demo__calc-2"]
    with pytest.raises(ValueError, match=r"instance_ids \['nope'\] are not in"):
        load(jsonl, instance_ids=["nope"])


def test_a_row_the_package_cannot_describe_fails_alone(rows, tmp_path):
    broken = {**rows[0], "instance_id": "demo__bad", "log_parser": "parse_log_nowhere"}
    partial = {k: v for k, v in rows[1].items() if k != "eval_script"} | {"instance_id": "demo__old"}
    option = {**rows[0], "instance_id": "demo__option", "base_commit": "--output=/etc/passwd"}
    path = tmp_path / "i.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [rows[0], broken, partial, option]))
    tasks = {t.task_id: t for t in load(path)}
    assert tasks["demo__calc-1"].load_error is None
    assert "log parser 'parse_log_nowhere'" in tasks["demo__bad"].load_error
    assert "has no eval_script" in tasks["demo__old"].load_error
    assert "is not a commit id" in tasks["demo__option"].load_error  # never an option of git diff


def test_a_missing_path_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        SwebenchBenchmark().build_config(request(tmp_path / "nothing.jsonl"))


@pytest.mark.parametrize(("image", "namespace", "tag", "expected"), [
    ("docker.io/swebench/sweb.eval.x86_64.a_1776_b-1:latest", None, None, "docker.io/swebench/sweb.eval.x86_64.a_1776_b-1:latest"),
    ("docker.io/swebench/sweb.eval.x86_64.a_1776_b-1:latest", "reg.example:5000/mirror", "v2",
     "reg.example:5000/mirror/sweb.eval.x86_64.a_1776_b-1:v2"),
    ("swebench/sweb.eval.x86_64.a_1776_b-1", "", None, "sweb.eval.x86_64.a_1776_b-1:latest"),
])
def test_image_names(image, namespace, tag, expected):
    assert image_name(image, namespace, tag) == expected


class NeverOpened(DockerEnvironment):
    async def open(self, *args, **kwargs):
        raise AssertionError("planning opened an environment")


def plan_of(req: RunRequest):
    benchmark = SwebenchBenchmark()
    task = benchmark.load_tasks(req)[0]
    registry = Registry("recipe")
    registry.register()(SwebenchVerified)
    return Planner(benchmark, OracleHarness(), registry, NeverOpened()).plan(req, task, 1)


def test_the_recipe_runs_the_instance_image_offline_and_keeps_the_users_choices(rows, tmp_path):
    path = tmp_path / "i.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plan = plan_of(request(path, image_namespace="mirror", image_tag="t9"))
    assert plan.applied_recipes == ["swebench_verified"] and isinstance(plan.benchmark_plan, SwebenchPlan)
    for spec in (plan.task_environment, plan.evaluation_environment):
        assert spec is not None
        assert spec.params["image"] == "mirror/sweb.eval.x86_64.demo_1776_calc-1:t9"
        assert spec.params["workdir"] == "/testbed" and "docker pull" in spec.params["missing_image_hint"]
    assert plan.evaluation_environment_mode == "fresh"
    assert [getattr(plan, f"{p}_network").mode for p in ("baseline", "run", "evaluation")] == ["none"] * 3
    assert plan.execution.task_timeout == 3600.0

    chosen = EnvironmentSpec(id="docker", params={"image": "mine:1", "workdir": "/src"},
                             run_network=NetworkPolicy(mode="public"))
    plan = plan_of(request(path, environment=chosen, execution=ExecutionSpec(task_timeout=60)))
    assert plan.task_environment.params["image"] == "mine:1" and plan.task_environment.params["workdir"] == "/src"
    assert "missing_image_hint" not in plan.task_environment.params
    assert plan.run_network.mode == "public" and plan.evaluation_network.mode == "none"
    assert plan.execution.task_timeout == 60


def test_swebench_runs_only_on_docker(rows, tmp_path):
    path = tmp_path / "i.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n")
    req = request(path, environment=EnvironmentSpec(id="host_process"))
    with pytest.raises(ValueError, match="select environment 'docker'"):
        SwebenchBenchmark().build_plan(SwebenchBenchmark().load_tasks(req)[0], req, req.environment)
