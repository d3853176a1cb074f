"""Planner.plan: recipes, evaluation mode, network policies, attempts; the run recipe registry."""

from __future__ import annotations

import textwrap

import pytest

from agentcompass.benchmarks import ExampleExactMatchBenchmark
from agentcompass.benchmarks.example_exact_match import ExampleExactMatchPlan
from agentcompass.environments import HostProcessEnvironment
from agentcompass.harnesses import OracleHarness
from agentcompass.recipes.task_environment_hints import TaskEnvironmentHints
from agentcompass.runtime import BaseRecipe, Planner, build_run_recipe_registry
from agentcompass.runtime.config import ConfigError
from agentcompass.runtime.models import (
    BenchmarkSpec,
    EnvironmentSpec,
    ExecutionPlan,
    ExecutionSpec,
    HarnessPlan,
    HarnessSpec,
    ModelSpec,
    NetworkPolicy,
    RunMetadata,
    RunRequest,
    TaskSpec,
)
from agentcompass.runtime.planner import RecipeContractError
from agentcompass.runtime.registry import RECIPES, Registry


def make_request(environment: EnvironmentSpec | None = None, enabled_recipes=(), recipe_dirs=()) -> RunRequest:
    return RunRequest(
        model=ModelSpec(),
        benchmark=BenchmarkSpec(id="example_exact_match", params={"case_sensitive": True}),
        harness=HarnessSpec(id="oracle"),
        environment=environment or EnvironmentSpec(),
        execution=ExecutionSpec(enabled_recipes=list(enabled_recipes)),
        metadata=RunMetadata(request_name="r", recipe_dirs=list(recipe_dirs)),
    )


def make_task(**kwargs) -> TaskSpec:
    return TaskSpec(task_id=kwargs.pop("task_id", "capital-france"), question="Capital of France?",
                    ground_truth="Paris", **kwargs)


def make_planner(registry: Registry | None = None, environment=None) -> Planner:
    return Planner(ExampleExactMatchBenchmark(), OracleHarness(), registry or Registry("recipe"), environment)


CALLS: list[tuple[str, int]] = []


def recipe_class(recipe_id: str, *, matches=True, same_object=False, param: str | None = None):
    """A small test Recipe that records the identity of the plan it receives."""

    class _Recipe(BaseRecipe):
        id = recipe_id

        def matches(self, req, task, plan):
            return matches

        def apply(self, plan, req, task):
            CALLS.append((recipe_id, id(plan)))
            if same_object:
                plan.task_environment.params["mutated"] = True
                return plan
            adapted = plan.copy()
            adapted.task_environment.params[param or recipe_id] = recipe_id
            adapted.harness_plan.params.setdefault("seen", []).append(recipe_id)
            OUTPUTS[recipe_id] = id(adapted)
            return adapted

    _Recipe.__name__ = f"Recipe_{recipe_id}"
    return _Recipe


OUTPUTS: dict[str, int] = {}


@pytest.fixture(autouse=True)
def _reset_calls():
    CALLS.clear()
    OUTPUTS.clear()
    yield
    CALLS.clear()
    OUTPUTS.clear()


def registry_of(*classes) -> Registry:
    registry = Registry("recipe")
    for cls in classes:
        registry.register()(cls)
    return registry


# --- base plan ------------------------------------------------------------------


def test_plan_holds_benchmark_and_harness_subplans():
    plan = make_planner().plan(make_request(), make_task(), 1)
    assert isinstance(plan, ExecutionPlan)
    assert plan.task_id == "capital-france"
    assert plan.benchmark_id == "example_exact_match"
    assert plan.benchmark_plan == ExampleExactMatchPlan(
        expected="Paris", case_sensitive=True, strip_whitespace=True, prompt=plan.benchmark_plan.prompt
    )
    assert "France" in plan.benchmark_plan.prompt
    assert plan.harness_plan == HarnessPlan(harness_id="oracle", params={})
    assert plan.applied_recipes == []


def test_harness_free_planner_uses_base_harness_plan():
    planner = Planner(ExampleExactMatchBenchmark(), None, Registry("recipe"))
    plan = planner.plan(make_request(), make_task(), 1)
    assert plan.harness_plan == HarnessPlan(harness_id="none")


def test_plan_execution_is_a_copy_of_the_request_execution():
    req = make_request()
    plan = make_planner().plan(req, make_task(), 1)
    assert plan.execution == req.execution
    plan.execution.enabled_recipes.append("x")
    assert req.execution.enabled_recipes == []


def test_planning_does_not_mutate_the_request():
    req = make_request(EnvironmentSpec(params={"a": 1}))
    before = req.to_dict()
    registry = registry_of(recipe_class("one"))
    make_planner(registry).plan(req, make_task(run_network=NetworkPolicy(), evaluation_environment_mode="fresh"), 1)
    assert req.to_dict() == before


# --- recipes -----------------------------------------------------------------------


def test_recipes_apply_in_registry_insertion_order():
    registry = registry_of(recipe_class("zeta"), recipe_class("alpha"), recipe_class("mid"))
    plan = make_planner(registry).plan(make_request(), make_task(), 1)
    assert plan.applied_recipes == ["zeta", "alpha", "mid"]
    assert [rid for rid, _ in CALLS] == ["zeta", "alpha", "mid"]
    assert plan.harness_plan.params["seen"] == ["zeta", "alpha", "mid"]


def test_non_matching_recipe_is_skipped():
    registry = registry_of(recipe_class("yes"), recipe_class("no", matches=False), recipe_class("also"))
    plan = make_planner(registry).plan(make_request(), make_task(), 1)
    assert plan.applied_recipes == ["yes", "also"]
    assert "no" not in plan.task_environment.params


def test_a_recipe_for_other_benchmarks_is_not_asked_and_not_in_the_plans_fingerprint():
    from agentcompass.pipeline.fingerprints import Extra, plans_param
    from agentcompass.stages import stage

    elsewhere = recipe_class("elsewhere")
    elsewhere.benchmarks = ("swebench",)
    here = recipe_class("here")
    here.benchmarks = ("example_exact_match",)
    plan = make_planner(registry_of(elsewhere, here)).plan(make_request(), make_task(), 1)
    assert plan.applied_recipes == ["here"] and [rid for rid, _ in CALLS] == ["here"]
    # the built-in one for SWE-bench: in the fingerprint of a swebench request only
    req = make_request()
    recipes = plans_param(req, stage("plans"), Extra())[0]["recipes"]
    assert "swebench_verified" not in recipes and "task_environment_hints" in recipes
    req.benchmark.id = "swebench"
    assert "swebench_verified" in plans_param(req, stage("plans"), Extra())[0]["recipes"]


def test_enabled_recipes_is_a_whitelist():
    registry = registry_of(recipe_class("first"), recipe_class("second"), recipe_class("third"))
    plan = make_planner(registry).plan(make_request(enabled_recipes=["third", "first"]), make_task(), 1)
    # whitelisted recipes still run in registry order, not whitelist order
    assert plan.applied_recipes == ["first", "third"]
    assert "second" not in plan.task_environment.params
    assert [rid for rid, _ in CALLS] == ["first", "third"]


def test_empty_enabled_recipes_considers_every_recipe():
    registry = registry_of(recipe_class("first"), recipe_class("second"))
    plan = make_planner(registry).plan(make_request(enabled_recipes=[]), make_task(), 1)
    assert plan.applied_recipes == ["first", "second"]


def test_recipe_returning_the_same_plan_object_raises():
    registry = registry_of(recipe_class("lazy", same_object=True))
    with pytest.raises(RecipeContractError, match="lazy"):
        make_planner(registry).plan(make_request(), make_task(), 1)


def test_recipe_returning_something_else_than_a_plan_raises():
    class Bad(BaseRecipe):
        id = "bad"

        def matches(self, req, task, plan):
            return True

        def apply(self, plan, req, task):
            return plan.to_dict()

    with pytest.raises(RecipeContractError, match="bad"):
        make_planner(registry_of(Bad)).plan(make_request(), make_task(), 1)


def test_each_recipe_receives_the_plan_returned_by_the_previous_one():
    registry = registry_of(recipe_class("one"), recipe_class("two"), recipe_class("three"))
    plan = make_planner(registry).plan(make_request(), make_task(), 1)
    received = dict(CALLS)
    assert received["two"] == OUTPUTS["one"]
    assert received["three"] == OUTPUTS["two"]
    assert id(plan) == OUTPUTS["three"]
    assert plan.task_environment.params == {"one": "one", "two": "two", "three": "three"}


def test_recipe_apply_does_not_mutate_the_original_plan():
    req = make_request()
    task = make_task(metadata={"environment": {"params": {"memory": "2g"}, "run_network": "public"}})
    base = make_planner().plan(req, task, 1)
    base.run_network = None  # as before step 7, so the hint has something to fill
    before = base.to_dict()
    adapted = TaskEnvironmentHints().apply(base, req, task)
    assert adapted is not base
    assert base.to_dict() == before
    assert adapted.task_environment.params == {"memory": "2g"}
    assert adapted.run_network == NetworkPolicy(mode="public")


# --- evaluation mode ------------------------------------------------------------------


@pytest.mark.parametrize("request_mode, task_mode, expected", [
    ("fresh", "task", "fresh"),
    ("task", "fresh", "task"),
    (None, "fresh", "fresh"),
    (None, "task", "task"),
    (None, None, "task"),  # the Benchmark default
])
def test_evaluation_mode_precedence_request_task_benchmark(request_mode, task_mode, expected):
    req = make_request(EnvironmentSpec(evaluation_environment_mode=request_mode))
    plan = make_planner().plan(req, make_task(evaluation_environment_mode=task_mode), 1)
    assert plan.evaluation_environment_mode == expected
    assert plan.task_environment.evaluation_environment_mode == expected


def test_benchmark_default_evaluation_mode_is_used_last():
    class FreshBenchmark(ExampleExactMatchBenchmark):
        def resolve_evaluation_environment_mode(self, req):
            return "fresh"

    planner = Planner(FreshBenchmark(), OracleHarness(), Registry("recipe"))
    assert planner.plan(make_request(), make_task(), 1).evaluation_environment_mode == "fresh"
    req = make_request(EnvironmentSpec(evaluation_environment_mode="task"))
    assert planner.plan(req, make_task(), 1).evaluation_environment_mode == "task"


def test_fresh_mode_creates_evaluation_environment():
    req = make_request(EnvironmentSpec(params={"keep_workspace": True}, evaluation_environment_mode="fresh"))
    plan = make_planner().plan(req, make_task(), 1)
    assert plan.evaluation_environment is not None
    assert plan.evaluation_environment is not plan.task_environment
    assert plan.evaluation_environment.id == "host_process"
    assert plan.evaluation_environment.params == {"keep_workspace": True}


class _ToolHarness(OracleHarness):
    def tools(self, config) -> tuple[str, ...]:
        return ("codex", "claude-code@2.1.0")


def test_the_harness_s_tools_are_in_the_task_environment_only_and_plans_without_tools_keep_their_json():
    req = make_request(EnvironmentSpec(evaluation_environment_mode="fresh"))
    plan = Planner(ExampleExactMatchBenchmark(), _ToolHarness(), Registry("recipe")).plan(req, make_task(), 1)
    assert plan.task_environment.tools == ["codex@0.169.0", "claude-code@2.1.0"]  # a bare name: its pinned version
    assert plan.evaluation_environment is not None and plan.evaluation_environment.tools == []
    assert plan.to_dict()["task_environment"]["tools"] == ["codex@0.169.0", "claude-code@2.1.0"]
    plain = make_planner().plan(req, make_task(), 1).to_dict()
    assert "tools" not in plain["task_environment"] and "tools" not in plain["evaluation_environment"]
    assert EnvironmentSpec.from_dict(plan.to_dict()["task_environment"]) == plan.task_environment


def test_a_harness_naming_an_unknown_tool_fails_planning():
    class Unknown(OracleHarness):
        def tools(self, config) -> tuple[str, ...]:
            return ("nosuch@1",)

    with pytest.raises(ConfigError, match="no tool is named 'nosuch'"):
        Planner(ExampleExactMatchBenchmark(), Unknown(), Registry("recipe")).plan(make_request(), make_task(), 1)


def test_task_mode_leaves_evaluation_environment_none():
    plan = make_planner().plan(make_request(EnvironmentSpec(evaluation_environment_mode="task")), make_task(), 1)
    assert plan.evaluation_environment is None


# --- network policies ----------------------------------------------------------------


def test_explicit_request_policy_wins_over_task_hint():
    req = make_request(EnvironmentSpec(run_network=NetworkPolicy(mode="public")))
    task = make_task(run_network=NetworkPolicy(mode="none"), baseline_network=NetworkPolicy(mode="none"))
    plan = make_planner().plan(req, task, 1)
    assert plan.run_network == NetworkPolicy(mode="public")
    assert plan.baseline_network == NetworkPolicy(mode="none")  # task hint where the request set none
    assert plan.evaluation_network == NetworkPolicy(mode="public")  # missing -> public


def test_missing_policies_become_public():
    plan = make_planner().plan(make_request(), make_task(), 1)
    for phase in ("baseline", "run", "evaluation"):
        assert getattr(plan, f"{phase}_network") == NetworkPolicy(mode="public")
        assert getattr(plan.task_environment, f"{phase}_network") == NetworkPolicy(mode="public")


def test_request_none_policy_wins_over_task_public_hint():
    req = make_request(EnvironmentSpec(evaluation_network=NetworkPolicy(mode="none")))
    plan = make_planner().plan(req, make_task(evaluation_network=NetworkPolicy(mode="public")), 1)
    assert plan.evaluation_network == NetworkPolicy(mode="none")


def test_provider_resolves_phase_policies(monkeypatch):
    from agentcompass.environments import netns

    req = make_request(EnvironmentSpec(run_network=NetworkPolicy(mode="none")))
    monkeypatch.setattr(netns, "network_isolation", lambda: (False, "namespaces are off here"))
    with pytest.raises(ConfigError, match="host_process"):
        make_planner(environment=HostProcessEnvironment()).plan(req, make_task(), 1)
    monkeypatch.setattr(netns, "network_isolation", lambda: (True, ""))
    assert make_planner(environment=HostProcessEnvironment()).plan(req, make_task(), 1).run_network == NetworkPolicy(mode="none")
    plan = make_planner(environment=HostProcessEnvironment()).plan(make_request(), make_task(), 1)
    assert plan.run_network == NetworkPolicy(mode="public")


# --- attempts ----------------------------------------------------------------------


def test_each_attempt_gets_its_own_plan():
    registry = registry_of(recipe_class("one"))
    planner = make_planner(registry)
    req, task = make_request(), make_task()
    first = planner.plan(req, task, 1)
    second = planner.plan(req, task, 2)
    assert (first.attempt, second.attempt) == (1, 2)
    assert first is not second
    assert first.task_environment is not second.task_environment
    assert first.applied_recipes == second.applied_recipes == ["one"]  # no side effects carried over
    first.task_environment.params["x"] = 1
    assert "x" not in second.task_environment.params


def test_plans_of_the_same_attempt_are_identical():
    planner = make_planner(registry_of(recipe_class("one")))
    req, task = make_request(), make_task()
    assert planner.plan(req, task, 1).to_dict() == planner.plan(req, task, 1).to_dict()


# --- built-in task_environment_hints ------------------------------------------------------


def builtin_planner() -> Planner:
    return make_planner(build_run_recipe_registry(make_request()))


def test_task_environment_hints_is_registered_built_in():
    assert "task_environment_hints" in RECIPES
    assert list(build_run_recipe_registry(make_request()))[0] == "task_environment_hints"


def test_task_environment_hints_lands_in_applied_recipes():
    task = make_task(metadata={"environment": {"params": {"memory": "2g"}}})
    plan = builtin_planner().plan(make_request(), task, 1)
    assert plan.applied_recipes == ["task_environment_hints"]
    assert plan.task_environment.params["memory"] == "2g"


def test_task_environment_hints_does_not_override_user_param():
    req = make_request(EnvironmentSpec(params={"memory": "8g"}))
    task = make_task(metadata={"environment": {"params": {"memory": "2g", "cpus": 2}}})
    plan = builtin_planner().plan(req, task, 1)
    assert "task_environment_hints" in plan.applied_recipes
    assert plan.task_environment.params == {"memory": "8g", "cpus": 2}


def test_task_environment_hints_does_not_apply_without_hints():
    for metadata in ({}, {"dataset_revision": "v1"}, {"environment": {}}, {"environment": "big"}):
        plan = builtin_planner().plan(make_request(), make_task(metadata=metadata), 1)
        assert plan.applied_recipes == []
        assert plan.task_environment.params == {}


def test_task_environment_hints_network_hint_fills_only_unset_phases():
    req = make_request(EnvironmentSpec(run_network=NetworkPolicy(mode="public")))
    task = make_task(metadata={"environment": {"run_network": "none", "baseline_network": {"mode": "none"}}})
    plan = builtin_planner().plan(req, task, 1)
    assert plan.applied_recipes == ["task_environment_hints"]
    assert plan.run_network == NetworkPolicy(mode="public")
    assert plan.baseline_network == NetworkPolicy(mode="none")
    assert plan.evaluation_network == NetworkPolicy(mode="public")


def test_task_environment_hints_skipped_when_not_whitelisted():
    task = make_task(metadata={"environment": {"params": {"memory": "2g"}}})
    req = make_request(enabled_recipes=["something_else"])
    plan = builtin_planner().plan(req, task, 1)
    assert plan.applied_recipes == []
    assert "memory" not in plan.task_environment.params


# --- build_run_recipe_registry -----------------------------------------------------------


RECIPE_SOURCE = textwrap.dedent('''
    from agentcompass.runtime import BaseRecipe


    class ExternalRecipe(BaseRecipe):
        """A trusted external Recipe used by the unit tests."""

        id = "{rid}"

        def matches(self, req, task, plan):
            return True

        def apply(self, plan, req, task):
            adapted = plan.copy()
            adapted.task_environment.params["external"] = True
            return adapted
''')


def write_recipe(directory, rid="unit_external_recipe", name="external.py"):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(RECIPE_SOURCE.replace("{rid}", rid))
    return directory


def test_recipe_dir_recipe_is_appended_after_builtins(tmp_path):
    directory = write_recipe(tmp_path / "recipes")
    req = make_request(recipe_dirs=[str(directory)])
    registry = build_run_recipe_registry(req)
    ids = list(registry)
    assert ids[-1] == "unit_external_recipe"
    assert ids[: len(RECIPES._items)] == list(RECIPES)
    assert issubclass(registry.get("unit_external_recipe"), BaseRecipe)
    # the global registry is not changed
    assert "unit_external_recipe" not in RECIPES
    plan = make_planner(registry).plan(
        req, make_task(metadata={"environment": {"params": {"memory": "2g"}}}), 1
    )
    assert plan.applied_recipes == ["task_environment_hints", "unit_external_recipe"]
    assert plan.task_environment.params == {"memory": "2g", "external": True}


def test_recipe_absent_without_its_directory_listed(tmp_path):
    write_recipe(tmp_path / "recipes")
    registry = build_run_recipe_registry(make_request())
    assert "unit_external_recipe" not in registry
    assert list(registry) == list(RECIPES)


def test_missing_recipe_dir_raises_config_error(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError) as info:
        build_run_recipe_registry(make_request(recipe_dirs=[str(missing)]))
    assert str(missing) in str(info.value)
    assert "Fix:" in str(info.value)


def test_recipe_dir_with_duplicate_builtin_id_raises(tmp_path):
    directory = write_recipe(tmp_path / "recipes", rid="task_environment_hints")
    with pytest.raises(ConfigError, match="task_environment_hints"):
        build_run_recipe_registry(make_request(recipe_dirs=[str(directory)]))


def test_recipe_dir_with_broken_file_raises_config_error(tmp_path):
    directory = tmp_path / "recipes"
    directory.mkdir()
    (directory / "broken.py").write_text("raise RuntimeError('nope')\n")
    with pytest.raises(ConfigError, match="broken.py"):
        build_run_recipe_registry(make_request(recipe_dirs=[str(directory)]))
