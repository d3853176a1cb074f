"""BFCL: the answer decoder, the AST checker (against bfcl-eval's own), the tools and the oracle's reference."""

from __future__ import annotations

import copy
import json

import pytest

from agentcompass.benchmarks import bfcl
from agentcompass.benchmarks.bfcl_checker import decode_calls
from agentcompass.testing.dependencies import needs, require
from agentcompass.runtime import BenchmarkSpec, HarnessSpec, ModelSpec, RunRequest, TaskSpec
from agentcompass.runtime.config import ConfigError

TRIANGLE = {
    "name": "geometry.triangle_area",
    "description": "Area of a triangle.",
    "parameters": {
        "type": "dict",
        "properties": {
            "base": {"type": "float", "description": "The base."},
            "height": {"type": "integer", "description": "The height."},
            "unit": {"type": "string", "description": "The unit."},
            "options": {"type": "dict", "description": "Options.", "properties": {"round": {"type": "boolean"}}},
            "points": {"type": "tuple", "items": {"type": "integer"}, "description": "Points."},
            "anything": {"type": "any", "description": "Whatever."},
        },
        "required": ["base", "height"],
    },
}
CIRCLE = {
    "name": "circle_area",
    "description": "Area of a circle.",
    "parameters": {"type": "dict", "properties": {"radius": {"type": "integer", "description": "r"}}, "required": ["radius"]},
}
TRIANGLE_TRUTH = {"geometry.triangle_area": {"base": [10.0], "height": [5], "unit": ["", "square meters", "m^2"]}}


def task(category: str, functions: list[dict], truth: list[dict] | None) -> TaskSpec:
    return TaskSpec(task_id=f"{category}_0", category=category, ground_truth=truth,
                    metadata={"functions": functions, "messages": []})


def call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


SIMPLE = task("simple_python", [TRIANGLE], [TRIANGLE_TRUTH])


@pytest.mark.parametrize("answer, valid", [
    ([call("geometry_triangle_area", base=10.0, height=5)], True),
    ([call("geometry.triangle_area", base=10.0, height=5)], False),  # a tool call must use the offered name
    ([{"geometry.triangle_area": {"base": 10.0, "height": 5}}], True),  # BFCL's own form, with BFCL's (dotted) name
    ([call("geometry_triangle_area", base=10, height=5)], True),  # an int where a float is declared
    ([call("geometry_triangle_area", base=10.0, height=5, unit="Square-Meters")], True),  # normalised string
    ([call("triangle_area", base=10.0, height=5)], False),  # wrong function name
    ([call("geometry_triangle_area", base=11.0, height=5)], False),  # wrong value
    ([call("geometry_triangle_area", base=10.0, height=5, unit="feet")], False),  # a value not allowed
    ([call("geometry_triangle_area", base=10.0)], False),  # a required parameter missing
    ([call("geometry_triangle_area", base=10.0, height=5, color="red")], False),  # an unknown parameter
    ([call("geometry_triangle_area", base=10.0, height="5")], False),  # wrong type
    ([call("geometry_triangle_area", base=10.0, height=5)] * 2, False),  # one call too many
    ([], False),
    ("the area is 25", False),
])
def test_simple_checks_name_parameters_types_and_values(answer, valid):
    assert bfcl.check(SIMPLE, answer)["valid"] is valid


def test_a_wrong_name_and_a_wrong_value_say_why():
    assert bfcl.check(SIMPLE, [call("triangle", base=10.0, height=5)])["error_type"] == "simple_function_checker:wrong_func_name"
    assert bfcl.check(SIMPLE, [call("geometry_triangle_area", base=1.0, height=5)])["error_type"] == "value_error:others"


def test_parallel_calls_match_in_any_order_but_not_twice():
    truth = [{"circle_area": {"radius": [1]}}, {"circle_area": {"radius": [2]}}]
    parallel = task("parallel", [CIRCLE], truth)
    assert bfcl.check(parallel, [call("circle_area", radius=2), call("circle_area", radius=1)])["valid"]
    assert not bfcl.check(parallel, [call("circle_area", radius=1), call("circle_area", radius=1)])["valid"]
    assert not bfcl.check(parallel, [call("circle_area", radius=1)])["valid"]


def test_multiple_picks_the_right_function_among_several():
    multiple = task("multiple", [TRIANGLE, CIRCLE], [{"circle_area": {"radius": [3]}}])
    assert bfcl.check(multiple, [call("circle_area", radius=3)])["valid"]
    assert not bfcl.check(multiple, [call("geometry_triangle_area", base=3.0, height=3)])["valid"]


@pytest.mark.parametrize("answer, valid", [
    (None, True), ("", True), ([], True), ("I cannot help with that.", True), ('"just text"', True),
    ([call("circle_area", radius=3)], False), (json.dumps([call("circle_area")]), False),
])
def test_irrelevance_passes_only_when_no_function_is_called(answer, valid):
    assert bfcl.check(task("irrelevance", [CIRCLE], None), answer)["valid"] is valid


def test_answers_decode_from_every_accepted_shape():
    expected = [{"f": {"x": 1}}]
    assert decode_calls([{"name": "f", "arguments": {"x": 1}}]) == expected
    assert decode_calls([{"name": "f", "arguments": '{"x": 1}'}]) == expected  # OpenAI sends a JSON string
    assert decode_calls([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]) == expected
    assert decode_calls([{"f": {"x": 1}}]) == expected  # BFCL's own form
    assert decode_calls({"name": "f", "arguments": {"x": 1}}) == expected
    assert decode_calls(json.dumps([{"f": {"x": 1}}])) == expected
    assert decode_calls([{"name": {"x": 1}}]) == [{"name": {"x": 1}}]  # a function called "name"
    for not_calls in ("f(x=1)", [1], [{"f": 1}], [{"name": "f", "arguments": "{broken"}], 3):
        assert decode_calls(not_calls) is None


def test_tools_are_openai_function_tools_with_json_schema_types():
    (tool,) = bfcl.to_openai_tools([TRIANGLE])
    function = tool["function"]
    assert tool["type"] == "function"
    assert function["name"] == "geometry_triangle_area"  # OpenAI names allow no dots
    assert function["description"].endswith("Note that the provided function is in Python 3 syntax.")
    props = function["parameters"]["properties"]
    assert function["parameters"]["type"] == "object"
    assert (props["base"]["type"], props["base"]["format"]) == ("number", "float")
    assert props["options"]["type"] == "object" and props["options"]["properties"]["round"]["type"] == "boolean"
    assert props["points"]["type"] == "array" and props["points"]["items"]["type"] == "integer"
    assert props["anything"]["type"] == "string"
    assert TRIANGLE["parameters"]["type"] == "dict"  # the task's own docs are left alone


def test_reference_takes_first_allowed_values_and_leaves_optional_ones_out():
    truth = [{"geometry.triangle_area": {"base": ["", 10.0], "height": [5], "unit": ["", "m"], "options": [{"round": ["", True]}],
                                         "undeclared": ["", 1]}}]
    (reference,) = bfcl.reference_calls([TRIANGLE], truth)
    # base is required, so its first value other than "" is used; undeclared is not a parameter
    assert reference == {"name": "geometry_triangle_area", "arguments": {"base": 10.0, "height": 5, "options": {}}}
    assert bfcl.check(task("simple_python", [TRIANGLE], truth), [reference])["valid"]


def test_unsupported_and_unknown_categories_are_refused_with_the_supported_list():
    with pytest.raises(ConfigError, match="multi_turn_base.*not supported.*simple_python"):
        bfcl.BfclConfig(categories=["multi_turn_base"])
    with pytest.raises(ConfigError, match="'simple' is not a BFCL v4 category.*simple_python"):
        bfcl.BfclConfig(categories=["simple"])


# --- against the real data and bfcl-eval's own checker -------------------------------


def request(**params) -> RunRequest:
    return RunRequest(model=ModelSpec(), benchmark=BenchmarkSpec("bfcl", params), harness=HarnessSpec("oracle"))


@pytest.fixture(scope="module")
def all_tasks() -> list[TaskSpec]:
    require(bfcl.DEPENDENCY)
    return bfcl.BfclBenchmark().load_tasks(request(include_unsatisfiable=True))


def test_every_supported_category_loads_from_the_pinned_package(all_tasks):
    counts = {c: sum(t.category == c for t in all_tasks) for c in bfcl.SUPPORTED}
    assert counts == {"simple_python": 400, "multiple": 200, "parallel": 200, "parallel_multiple": 200, "irrelevance": 240,
                      "live_simple": 258, "live_multiple": 1053, "live_parallel": 16, "live_parallel_multiple": 24,
                      "live_irrelevance": 884}
    default = bfcl.BfclBenchmark().load_tasks(request())
    assert {t.task_id for t in all_tasks} - {t.task_id for t in default} == set(bfcl.UNSATISFIABLE)


def variants(reference: list[dict], dotted: list[str | None]) -> list[list[dict]]:
    """The reference and answers one mistake away from it (``dotted``: each call's BFCL name if it has a dot)."""
    out = [reference, list(reversed(reference)), reference[:-1], reference + reference[:1], []]
    first = reference[0]
    out.append([{"name": first["name"] + "_x", "arguments": first["arguments"]}, *reference[1:]])
    for index, name in enumerate(dotted):
        if name is not None:  # the function's BFCL name instead of the tool name offered
            out.append([*reference[:index], {"name": name, "arguments": reference[index]["arguments"]}, *reference[index + 1:]])
    out.append([{"name": first["name"], "arguments": {**first["arguments"], "unexpected_x": 1}}, *reference[1:]])
    for param, value in first["arguments"].items():
        for changed in wrong_values(value):
            out.append([{"name": first["name"], "arguments": {**first["arguments"], param: changed}}, *reference[1:]])
        dropped = {k: v for k, v in first["arguments"].items() if k != param}
        out.append([{"name": first["name"], "arguments": dropped}, *reference[1:]])
    return out


def wrong_values(value):
    if isinstance(value, bool):
        return [not value, str(value)]
    if isinstance(value, int):
        return [value + 7, float(value), str(value)]
    if isinstance(value, float):
        return [value + 7.5, int(value) if value.is_integer() else round(value, 1)]
    if isinstance(value, str):
        return [value.upper() + " ", value.replace(" ", "_") + "./", value + " nowhere", 3]
    if isinstance(value, list):
        return [value + value[:1], [], value[::-1]]
    if isinstance(value, dict):
        return [{**value, "unexpected_x": 1}, {}]
    return [None]


def test_checker_agrees_with_bfcl_evals_own_on_references_and_near_misses(all_tasks, bfcl_ast_checker):
    """Names (a dotted BFCL name as a tool call too), missing and extra parameters, types, values, order, missing calls."""
    compared = dotted_names = 0
    for t in all_tasks:
        if "irrelevance" in t.category:
            continue
        reference = bfcl.reference_calls(t.metadata["functions"], t.ground_truth)
        dotted = [next(iter(c)) if "." in next(iter(c)) else None for c in t.ground_truth]
        for answer in variants(reference, dotted):
            output = [{c["name"]: c["arguments"]} for c in answer]
            theirs = bfcl_ast_checker(copy.deepcopy(t.metadata["functions"]), copy.deepcopy(output),
                                      copy.deepcopy(t.ground_truth), t.category)
            ours = bfcl.check(t, answer)
            assert (ours["valid"], ours.get("error_type")) == (theirs["valid"], theirs.get("error_type")), (t.task_id, answer)
            compared += 1
            dotted_names += any("." in c["name"] for c in answer)
    assert compared > 20_000 and dotted_names > 100


def test_the_oracle_reference_passes_every_task_but_the_unsatisfiable_ones(all_tasks, bfcl_ast_checker):
    failing = set()
    for t in all_tasks:
        reference = bfcl.BfclBenchmark().reference_solution(t, None)
        if "irrelevance" in t.category:
            assert reference == [] and bfcl.check(t, reference)["valid"]
            continue
        output = [{c["name"]: c["arguments"]} for c in reference]
        if not bfcl_ast_checker(copy.deepcopy(t.metadata["functions"]), output, copy.deepcopy(t.ground_truth), t.category)["valid"]:
            failing.add(t.task_id)
    assert failing == set(bfcl.UNSATISFIABLE)


@needs(bfcl.DEPENDENCY)
def test_every_data_file_of_the_package_is_either_supported_or_listed_as_unsupported():
    files = {p.name.removeprefix("BFCL_v4_").removesuffix(".json") for p in bfcl.data_dir().glob("BFCL_v4_*.json")}
    assert files == set(bfcl.SUPPORTED) | set(bfcl.UNSUPPORTED)
    assert not set(bfcl.SUPPORTED) & set(bfcl.UNSUPPORTED)
