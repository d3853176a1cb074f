"""BFCL's AST checker for Python function calls, reimplemented from bfcl-eval 2026.3.23.

``bfcl_eval/eval_checker/ast_eval/ast_checker.py`` cannot be imported on its own:
it pulls in every model handler (and with them torch). This module follows it
function by function for the Python language, so a verdict here is BFCL's
verdict, with two differences that come from checking an OpenAI tool call:

- a function named ``a.b`` in BFCL's docs is offered to the model as the tool
  ``a_b`` (OpenAI names allow no dots), and BFCL's checker then expects
  ``a_b``, as it does for OpenAI models: a tool call must use the offered name,
  and a tool call to ``a.b`` fails, as in BFCL;
- the answer may come in several shapes (``decode_calls``); BFCL's handler for
  OpenAI tool calls produces the same ``[{name: {arg: value}}]`` list. Only an
  answer in BFCL's own form ``[{name: {arg: value}}]``, where functions go by
  their BFCL names as in the ground truth, has ``a.b`` read as the tool ``a_b``.

Each check returns ``{"valid": bool, "error": [...], "error_type": str}`` as BFCL's does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Callable

# ast_checker.PYTHON_TYPE_MAPPING
PYTHON_TYPE_MAPPING = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
# the types whose items are checked too (one level deep, as in BFCL)
PYTHON_NESTED_TYPE_CHECK_LIST = ["array", "tuple"]


def tool_name(name: str) -> str:
    """The OpenAI tool name of a BFCL function (``convert_to_tool`` for OpenAI models)."""
    return re.sub(r"\.", "_", name)


# --- answer decoding --------------------------------------------------------------


def decode_calls(answer: Any, bfcl_names: Mapping[str, str] | None = None) -> list[dict[str, dict]] | None:
    """The harness answer as BFCL's decoded form ``[{name: {arg: value}}]``; None if it is not one.

    Accepted: ``[{"name": ..., "arguments": {...}}]`` (``arguments`` may be a JSON
    string, as OpenAI sends it), OpenAI's ``[{"type": "function", "function":
    {...}}]``, BFCL's own ``[{name: {...}}]``, one such call without the list, and
    a JSON string of any of these. No answer (None, "", []) is an empty list: no call.
    A call in BFCL's own form that names a function by its BFCL name (a key of
    ``bfcl_names``) is renamed to its tool name; a tool call keeps its name.
    """
    if answer is None:
        return []
    if isinstance(answer, str):
        if not answer.strip():
            return []
        try:
            answer = json.loads(answer)
        except json.JSONDecodeError:
            return None
        if isinstance(answer, str):
            return None
        return decode_calls(answer, bfcl_names)
    if isinstance(answer, dict):
        answer = [answer]
    if not isinstance(answer, list):
        return None
    calls = []
    for item in answer:
        call = _decode_call(item, bfcl_names or {})
        if call is None:
            return None
        calls.append(call)
    return calls


def _decode_call(item: Any, bfcl_names: Mapping[str, str]) -> dict[str, dict] | None:
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("function"), dict) and "name" in item["function"]:
        item = item["function"]
    if isinstance(item.get("name"), str) and set(item) <= {"name", "arguments", "id", "type"}:
        arguments = _arguments(item.get("arguments", {}))
        return {item["name"]: arguments} if arguments is not None else None
    if len(item) == 1:
        name, arguments = next(iter(item.items()))
        arguments = _arguments(arguments)
        return {bfcl_names.get(name, name): arguments} if arguments is not None else None
    return None


def _arguments(value: Any) -> dict | None:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            return None
    return value if isinstance(value, dict) else None


def is_empty_output(calls: list[dict] | None) -> bool:
    """utils.is_empty_output: no call at all (not a call list, [], or [{}])."""
    return calls is None or len(calls) == 0 or (len(calls) == 1 and len(calls[0]) == 0)


# --- the checker ----------------------------------------------------------------


def ast_checker(func_description: list[dict], model_output: list[dict], possible_answer: list[dict], test_category: str) -> dict:
    """ast_checker.ast_checker for Python: parallel (any order), multiple, or simple."""
    if "parallel" in test_category:
        return parallel_function_checker_no_order(func_description, model_output, possible_answer)
    if "multiple" in test_category:
        return multiple_function_checker(func_description, model_output, possible_answer)
    if len(model_output) != 1:
        return {"valid": False, "error": ["Wrong number of functions."], "error_type": "simple_function_checker:wrong_count"}
    return simple_function_checker(func_description[0], model_output[0], possible_answer[0])


def find_description(func_descriptions: list[dict], name: str) -> dict:
    for func_description in func_descriptions:
        if func_description["name"] == name:
            return func_description
    offered = [d["name"] for d in func_descriptions]
    raise ValueError(f"the possible answer calls {name!r}, which the entry does not offer (it offers {offered})")


def get_possible_answer_type(possible_answer: list):
    for answer in possible_answer:
        if answer != "":  # an optional parameter
            return type(answer)
    return None


def type_checker(param, value, possible_answer, expected_type_description, expected_type_converted, nested_type_converted) -> dict:
    """ast_checker.type_checker: the value's type, one level of nesting, and variables.

    A value of the type of the possible answers rather than the declared one (a
    variable name given as a string, in BFCL's data) passes as ``is_variable``.
    """
    result: dict[str, Any] = {"valid": True, "error": [], "is_variable": False, "error_type": "type_error:simple"}
    is_variable = False
    possible_answer_type = get_possible_answer_type(possible_answer)
    if possible_answer_type is not None and possible_answer_type != expected_type_converted:
        is_variable = True

    if type(value) is expected_type_converted:
        if nested_type_converted is None:
            result["is_variable"] = is_variable
            return result
        for possible_answer_item in possible_answer:
            flag = True
            if type(possible_answer_item) is list:
                for value_item in value:
                    checked = type_checker(param, value_item, possible_answer_item, str(nested_type_converted), nested_type_converted, None)
                    if not checked["valid"]:
                        flag = False
                        break
            if flag:
                return {"valid": True, "error": [], "is_variable": is_variable}
        result["valid"] = False
        result["error"] = [
            f"Nested type checking failed for parameter {param!r}. Expected outer type {expected_type_description} "
            f"with inner type {nested_type_converted}. Parameter value: {value!r}."
        ]
        result["error_type"] = "type_error:nested"

    if possible_answer_type is not None and type(value) is possible_answer_type:
        result["is_variable"] = True
        return result

    result["valid"] = False
    result["error"].append(
        f"Incorrect type for parameter {param!r}. Expected type {expected_type_description}, "
        f"got {type(value).__name__}. Parameter value: {value!r}."
    )
    result["error_type"] = "type_error:simple"
    return result


def standardize_string(input_string: str) -> str:
    """Spaces and ``,./-_*^`` removed, lower case, single quotes as double: 'April 1, 2024' == 'april 1 2024'."""
    return re.sub(r"[ \,\.\/\-\_\*\^]", "", input_string).lower().replace("'", '"')


def _standardized(values: list) -> list:
    return [standardize_string(v) if type(v) is str else v for v in values]


def string_checker(param: str, model_output: str, possible_answer: list) -> dict:
    allowed = [standardize_string(v) for v in possible_answer if type(v) is str]
    if standardize_string(model_output) not in allowed:
        return {
            "valid": False,
            "error": [f"Invalid value for parameter {param!r}: {model_output!r}. Expected one of {possible_answer}. Case insensitive."],
            "error_type": "value_error:string",
        }
    return {"valid": True, "error": []}


def list_checker(param: str, model_output: list, possible_answer: list) -> dict:
    standardized_output = _standardized(list(model_output))
    standardized_answers = [_standardized(answer) for answer in possible_answer]
    if standardized_output not in standardized_answers:
        return {
            "valid": False,
            "error": [f"Invalid value for parameter {param!r}: {model_output!r}. Expected one of {possible_answer}."],
            "error_type": "value_error:list/tuple",
        }
    return {"valid": True, "error": []}


def dict_checker(param: str, model_output: dict, possible_answers: list) -> dict:
    """One level of dict: every key known, every value allowed, every non-optional key present."""
    result: dict[str, Any] = {"valid": False, "error": [], "error_type": "dict_checker:unclear"}
    for possible_answer in possible_answers:
        if possible_answer == "":
            continue
        result = {"valid": False, "error": [], "error_type": "dict_checker:unclear"}
        flag = True
        for key, value in model_output.items():
            if key not in possible_answer:
                result["error"].append(f"Unexpected dict key parameter: '{key}'.")
                result["error_type"] = "value_error:dict_key"
                flag = False
                break
            standardized_value = standardize_string(value) if type(value) is str else value
            allowed = _standardized(possible_answer[key])
            if standardized_value not in allowed:
                result["error"].append(f"Invalid value for parameter {key!r}: {value!r}. Expected one of {allowed}.")
                result["error_type"] = "value_error:dict_value"
                flag = False
                break
        for key, value in possible_answer.items():
            if key not in model_output and "" not in value:
                result["error"].append(f"Missing dict key parameter: '{key}'.")
                result["error_type"] = "value_error:dict_key"
                flag = False
                break
        if flag:
            return {"valid": True, "error": []}
    return result


def list_dict_checker(param: str, model_output: list, possible_answers: list) -> dict:
    """A list of dicts, in the order of one of the possible answers."""
    result: dict[str, Any] = {"valid": False, "error": [], "error_type": "list_dict_checker:unclear"}
    for possible_answer in possible_answers:
        if len(model_output) != len(possible_answer):
            result = {"valid": False, "error": ["Wrong number of dictionaries in the list."], "error_type": "value_error:list_dict_count"}
            continue
        flag = True
        for index, item in enumerate(model_output):
            result = dict_checker(param, item, [possible_answer[index]])
            if not result["valid"]:
                flag = False
                break
        if flag:
            return {"valid": True, "error": []}
    return result


def simple_function_checker(func_description: dict, model_output: dict, possible_answer: dict) -> dict:
    """One call against one ground-truth call: name, required and unknown parameters, types, values."""
    possible_answer = list(possible_answer.values())[0]
    func_name = tool_name(func_description["name"])
    param_details = func_description["parameters"]["properties"]
    required_params = func_description["parameters"]["required"]
    result: dict[str, Any] = {"valid": True, "error": [], "error_type": "simple_function_checker:unclear"}

    if func_name not in model_output:
        return {"valid": False, "error": [f"Function name {func_name!r} not found in model output."],
                "error_type": "simple_function_checker:wrong_func_name"}
    model_params = model_output[func_name]

    for param in required_params:
        if param not in model_params:
            return {"valid": False, "error": [f"Missing required parameter: {param!r}."],
                    "error_type": "simple_function_checker:missing_required"}

    for param, value in model_params.items():
        if param not in param_details or param not in possible_answer:
            return {"valid": False, "error": [f"Unexpected parameter: {param!r}."],
                    "error_type": "simple_function_checker:unexpected_param"}
        expected_type_description = param_details[param]["type"]
        expected_type_converted = PYTHON_TYPE_MAPPING[expected_type_description]
        nested_type_converted = None
        if expected_type_description in PYTHON_NESTED_TYPE_CHECK_LIST:
            nested_type_converted = PYTHON_TYPE_MAPPING[param_details[param]["items"]["type"]]
        # Python converts an int to a float where a float is expected
        if expected_type_description == "float" and type(value) is int:
            value = float(value)

        checked = type_checker(param, value, possible_answer[param], expected_type_description,
                               expected_type_converted, nested_type_converted)
        if not checked["valid"]:
            return checked
        if not checked["is_variable"]:
            special: Callable[[str, Any, list], dict] | None = None
            if expected_type_converted is dict:
                special = dict_checker
            elif expected_type_converted is list and nested_type_converted is dict:
                special = list_dict_checker
            elif expected_type_converted is str:
                special = string_checker
            elif expected_type_converted is list:
                special = list_checker
            if special is not None:
                result = special(param, value, possible_answer[param])
                if not result["valid"]:
                    return result
                continue

        if value not in possible_answer[param]:
            return {"valid": False,
                    "error": [f"Invalid value for parameter {param!r}: {value!r}. Expected one of {possible_answer[param]}."],
                    "error_type": "value_error:others"}

    for param in possible_answer:
        if param not in model_params and "" not in possible_answer[param]:
            return {"valid": False,
                    "error": [f"Optional parameter {param!r} not provided and not marked as optional."],
                    "error_type": "simple_function_checker:missing_optional"}
    return result


def parallel_function_checker_no_order(func_descriptions: list, model_output: list, possible_answers: list) -> dict:
    """Every ground-truth call matched by a distinct call of the output, in any order."""
    if len(model_output) != len(possible_answers):
        return {"valid": False, "error": ["Wrong number of functions."],
                "error_type": "parallel_function_checker_no_order:wrong_count"}
    matched_indices: list[int] = []
    for i, possible_answer in enumerate(possible_answers):
        func_description = find_description(func_descriptions, next(iter(possible_answer)))
        all_errors: list[Any] = []
        result = {"valid": False}
        for index, call in enumerate(model_output):
            if index in matched_indices:
                continue
            result = simple_function_checker(func_description, call, possible_answer)
            if result["valid"]:
                matched_indices.append(index)
                break
            all_errors.append({f"Model Result Index {index}": {"sub_error": result["error"], "sub_error_type": result["error_type"]}})
        if not result["valid"]:
            considered = [j for j in range(len(model_output)) if j not in matched_indices]
            all_errors.insert(0, f"Could not find a matching function among index {considered} of model output "
                                 f"for index {i} of possible answers.")
            return {"valid": False, "error": all_errors, "error_type": "parallel_function_checker_no_order:cannot_find_match"}
    return {"valid": True, "error": []}


def multiple_function_checker(func_descriptions: list, model_output: list, possible_answers: list) -> dict:
    """One call, chosen among several offered functions."""
    if len(model_output) != len(possible_answers):
        return {"valid": False, "error": ["Wrong number of functions."], "error_type": "multiple_function_checker:wrong_count"}
    func_description = find_description(func_descriptions, next(iter(possible_answers[0])))
    return simple_function_checker(func_description, model_output[0], possible_answers[0])
