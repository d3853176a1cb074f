"""Result file names are written in two modules only: the stage table and the results layout.

Every other module of the package names a run's files through them
(``agentcompass.layout``, ``agentcompass.stages``). This reads each module's
source and lists, file:line, every string literal that is a path holding one
of those names: a file name alone (``"result.json"``), a path with one as a
part (``"report/index.html"``, an f-string's ``"/attempts/"``), or a folder
name joined with ``/`` (``path / "attempts"``). Text (a docstring, an error
message) names files in words and is not a path: a literal holding whitespace
is not one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "agentcompass"
# where the names are declared
OWNERS = {PACKAGE / "stages.py", PACKAGE / "layout.py"}
FILE_NAMES = {
    "request.json", "tasks.json", "plans.json", "run_info.json", "plan.json", "prepared.json", "output.json",
    "result.json", "metrics.json", "shard.json", "events.jsonl", "trajectory.jsonl", "index.html", "plans.index",
}
# folders of a run: a literal of one of these names is a path only when it is joined as one
FOLDER_NAMES = {"attempts", "report", "logs", "shards"}


def _is_path(text: str) -> bool:
    """Whether ``text`` (an f-string's formatted values as ``{}``) is a path to a run's file or folder:
    a file name as one of its parts, or a run's folder name first or after a value (``{run}/attempts``),
    not after a folder of another (``data/attempts``) nor at the root (``/logs``, a sandbox's)."""
    if not text or any(c.isspace() for c in text):
        return False
    parts = text.split("/")
    if any(part in FILE_NAMES for part in parts):
        return True
    return len(parts) > 1 and any(part in FOLDER_NAMES and (i == 0 or parts[i - 1] == "{}")
                                  for i, part in enumerate(parts))


def _joined_folder(node: ast.AST) -> bool:
    """``run / "attempts"`` (not ``out / "data" / "attempts"``: a folder of another)."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)):
        return False
    if isinstance(node.right, ast.Constant) and node.right.value in FOLDER_NAMES:
        left = node.left
        return not (isinstance(left, ast.BinOp) and isinstance(left.right, ast.Constant))
    return isinstance(node.left, ast.Constant) and node.left.value in FOLDER_NAMES


def literals(source: str) -> list[tuple[int, str]]:
    """(line, literal) of each result path written out in ``source``."""
    found = []
    tree = ast.parse(source)
    parts_of_fstrings = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            if _is_path(text):
                found.append((node.lineno, text))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts_of_fstrings:
            if _is_path(node.value):
                found.append((node.lineno, node.value))
        elif _joined_folder(node):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


@pytest.mark.parametrize("source, expected", [
    ('p = run / "result.json"', ["result.json"]),
    ('p = f"{run}/attempts/{segment}/{n}"', ["{}/attempts/{}/{}"]),
    ('p = f"{prefix}/report/index.html"', ["{}/report/index.html"]),
    ('p = run / "attempts" / segment', ["run / 'attempts'"]),
    ('glob("*/*/request.json")', ["*/*/request.json"]),
    ('"""Writes result.json and metrics.json."""', []),  # words, not a path
    ('raise ValueError(f"{path} holds no request.json: it is not a run")', []),
    ('execution = {"attempts": 2}; parser.add_parser("report")', []),  # a field and a command, not folders
    ('pages = out / "data" / "attempts"; logs = "/logs"', []),  # a folder of the report's, a sandbox's
])
def test_the_check_finds_paths_and_only_paths(source: str, expected: list[str]):
    assert [text for _, text in literals(source)] == expected


def test_no_module_but_the_table_and_the_layout_writes_a_result_file_name():
    offending = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in OWNERS:
            continue
        for line, text in literals(path.read_text(encoding="utf-8")):
            offending.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {text}")
    assert not offending, ("result file names written out of agentcompass.stages and agentcompass.layout "
                           "(name them through those):\n" + "\n".join(offending))
