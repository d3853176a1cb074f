"""The package's imports: no circle among its modules, and no import inside a function that goes up the layers.

The imports are read with ``ast`` (the package is not imported: this takes a fraction of a second). How they count:

- An import at module level is any ``import`` or ``from ... import`` outside a function (in a class body, a
  ``try`` or an ``if`` too), except under ``if TYPE_CHECKING:``, which never runs. One inside a ``def`` (or a
  lambda) is a function-level import.
- ``from a.b import c`` is an import of the module ``a.b.c`` when there is one, else of ``a.b``.
- A package's ``__init__`` is a module of its own, named as the package (``agentcompass.runtime``); its imports
  of its submodules are its edges like any other's. Importing ``a.b.c`` counts as an import of ``a.b.c``
  alone, not of ``a.b``'s ``__init__``: Python runs that ``__init__`` first, but needs it only started, not
  finished, so an ``__init__`` that gathers its submodules' names (``runtime``, ``benchmarks``) makes no
  circle with them. ``from a.b import name``, a name the ``__init__`` defines, needs it finished: an
  import of ``a.b``, and a circle when ``a.b``'s ``__init__`` imports the importer.

The rules:

- no circle among the modules' module-level imports (``test_no_module_level_circle``);
- every module has a layer (``LAYERS``, low to high), and a module-level import goes to a module of the same
  layer or a lower one (``test_module_level_imports_go_down_the_layers``): the table says what the code is;
- a function-level import goes to a lower layer (``test_no_function_level_import_up_or_sideways``): a lazy
  import of what is below, for start-up time (the CLI's commands, the SDK's workflow) or for what is loaded
  on request (the plug-ins' built-in components). One of the same layer or a higher one either dodges a
  circle (fix the circle) or has no reason to be in a function. ``ALLOWED`` lists the few kept, each with why.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "agentcompass"

# The layers, low to high: a module belongs to the layer of the longest prefix that names it or a package
# above it (the root package, ``agentcompass``, names its ``__init__`` alone).
LAYERS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("foundations", ("agentcompass", "agentcompass._util", "agentcompass.errors", "agentcompass.stages"),
     "the version, the utilities, the error root and the stage table: nothing of the package but each other"),
    ("leaves", ("agentcompass.layout", "agentcompass.secrets", "agentcompass.callcache", "agentcompass.tools",
                "agentcompass.protocols"),
     "paths, secrets, the call cache's keys, the tool cache, the protocols' pure translations: foundations only"),
    ("runtime", ("agentcompass.runtime", "agentcompass.spend"),
     "the contracts, config, registries and the model client; spend reads RunRequest and the client records in it"),
    ("files", ("agentcompass.pipeline.files", "agentcompass.pipeline.plan_index", "agentcompass.pipeline.reuse",
               "agentcompass.pipeline.reading"),
     "the pipeline's files as written and read (contracts, plans.json's index, tasks.json's cache): runtime only"),
    ("results", ("agentcompass.results", "agentcompass.atif", "agentcompass.report", "agentcompass.imports"),
     "a run folder's files as data, runs of other tools read as runs, and the report: the metrics and report "
     "stages and humaneval use them"),
    ("components", ("agentcompass.gateway", "agentcompass.environments", "agentcompass.benchmarks",
                    "agentcompass.harnesses", "agentcompass.analyzers", "agentcompass.scanners",
                    "agentcompass.testing"),
     "the built-in components and what they share (the gateway, the scripted endpoint): harnesses use both"),
    ("recipes", ("agentcompass.recipes",),
     "plan changes a task asks for: swebench_verified reads the swebench benchmark's plan"),
    ("plugins", ("agentcompass.plugins",),
     "fills the registries: the built-ins on request (below), plug-ins by entry point; the workflow loads it"),
    ("pipeline", ("agentcompass.pipeline",),
     "the workflow behind the Snakefile: the stages' bodies, targets, params, shards"),
    ("views", ("agentcompass.status", "agentcompass.plan_diff", "agentcompass.forecast", "agentcompass.compare",
               "agentcompass.replay"),
     "what status, diff, compare, forecast and replay compute: read through the pipeline, never built by it"),
    ("sdk", ("agentcompass.sdk",), "the Python SDK: builds an orchestration through the pipeline"),
    ("cli", ("agentcompass.cli",), "the agentcompass command: anything below (a few lazily, for start-up time)"),
)

# Function-level imports kept against the rule: (file, imported module, why).
ALLOWED: tuple[tuple[str, str, str], ...] = (
)


@dataclasses.dataclass(frozen=True)
class Import:
    """One import statement's edge: from module ``source`` (in ``file`` at ``line``) to module ``target``."""

    source: str
    target: str
    file: str
    line: int
    in_function: bool

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(node: ast.AST, in_function: bool = False):
    """Each import statement under ``node`` that runs (none under ``if TYPE_CHECKING:``), and whether it is
    inside a function."""
    for child in ast.iter_child_nodes(node):
        for statement in child.orelse if _is_type_checking(child) else [child]:  # type: ignore[attr-defined]
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                yield statement, in_function
            elif not _is_type_checking(statement):
                yield from _statements(statement, in_function or isinstance(
                    statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


def modules(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Every module of ``package`` under ``root``: its dotted name, its file and whether it is an ``__init__``."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_init = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_init else parts)] = (path, is_init)
    return found


def imports(root: Path, package: str) -> list[Import]:
    """Every import of a module of ``package`` by another, as ``ast`` reads the files (the project's read once)."""
    return _project_imports() if (root, package) == (ROOT, PACKAGE) else read_imports(root, package)


def read_imports(root: Path, package: str) -> list[Import]:
    known = modules(root, package)

    def module_of(name: str) -> str | None:
        while name not in known:
            if "." not in name:
                return None
            name = name.rsplit(".", 1)[0]
        return name

    found = []
    for source, (path, is_init) in known.items():
        file = path.relative_to(root).as_posix()
        for node, in_function in _statements(ast.parse(path.read_text(), file)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    here = source.split(".") if is_init else source.split(".")[:-1]
                    here = here[:len(here) - node.level + 1]
                    base = ".".join(here + ([node.module] if node.module else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            for target in dict.fromkeys(filter(None, map(module_of, names))):
                if target != source:
                    found.append(Import(source, target, file, node.lineno, in_function))
    return found


@functools.cache
def _project_imports() -> list[Import]:
    return read_imports(ROOT, PACKAGE)


def module_graph(edges: list[Import]) -> dict[str, dict[str, Import]]:
    """The module-level imports: each module's targets, each with its first import statement."""
    graph: dict[str, dict[str, Import]] = {}
    for edge in edges:
        if not edge.in_function:
            graph.setdefault(edge.source, {}).setdefault(edge.target, edge)
    return graph


def circles(graph: dict[str, dict[str, Import]]) -> list[list[Import]]:
    """One circle of module-level imports through each group of modules that import each other, as its edges."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    found = []
    for group in groups:
        start, members = min(group), set(group)
        path = path_between(graph, start, start, members)
        if path:
            found.append(path)
    return found


def path_between(graph: dict[str, dict[str, Import]], start: str, end: str,
                 within: set[str] | None = None) -> list[Import] | None:
    """A shortest chain of module-level imports from ``start`` to ``end`` (through ``within``), or None."""
    seen = {start}
    frontier: list[tuple[str, list[Import]]] = [(start, [])]
    while frontier:
        following = []
        for node, path in frontier:
            for target, edge in sorted(graph.get(node, {}).items()):
                if within is not None and target not in within:
                    continue
                if target == end:
                    return path + [edge]
                if target not in seen:
                    seen.add(target)
                    following.append((target, path + [edge]))
        frontier = following
    return None


def layer_of(module: str, layers=LAYERS, package: str = PACKAGE) -> int | None:
    """The index in ``layers`` of the layer of ``module``: its longest prefix listed, None when none is."""
    best, length = None, -1
    for number, (_, prefixes, _) in enumerate(layers):
        for prefix in prefixes:
            names = module == prefix or (prefix != package and module.startswith(prefix + "."))
            if names and len(prefix) > length:
                best, length = number, len(prefix)
    return best


def _chain(path: list[Import]) -> str:
    return "\n".join(f"    {edge.where}: {edge.source} imports {edge.target}" for edge in path)


def circle_problems(root: Path, package: str) -> list[str]:
    return [f"a circle of module-level imports:\n{_chain(path)}\n  Fix: move what one of them needs from the "
            "other into a module of a lower layer (or a new one), so that the imports go one way"
            for path in circles(module_graph(imports(root, package)))]


def up_problems(root: Path, package: str, layers=LAYERS) -> list[str]:
    """Module-level imports of a higher layer: the code and the layers disagree."""
    problems = []
    for edge in imports(root, package):
        source, target = layer_of(edge.source, layers, package), layer_of(edge.target, layers, package)
        if not edge.in_function and source is not None and target is not None and target > source:
            problems.append(
                f"{edge.where}: {edge.source} (layer {layers[source][0]}) imports {edge.target} (layer "
                f"{layers[target][0]}, higher) at module level. Fix: move what it needs to a lower layer; or, if "
                "the module is of another layer than the table says, move it in LAYERS, with its reason")
    return problems


def function_problems(root: Path, package: str, layers=LAYERS, allowed=ALLOWED) -> list[str]:
    """Function-level imports of the same layer or a higher one, less ``allowed``."""
    edges = imports(root, package)
    graph = module_graph(edges)
    exempt = {(file, module) for file, module, _ in allowed}
    problems = []
    for edge in edges:
        source, target = layer_of(edge.source, layers, package), layer_of(edge.target, layers, package)
        if not edge.in_function or source is None or target is None or target < source:
            continue
        if (edge.file, edge.target) in exempt:
            continue
        back = path_between(graph, edge.target, edge.source)
        what = "of a higher layer" if target > source else "of its own layer"
        if back:
            fix = (f"it dodges a circle, as {edge.target} imports {edge.source} at module level:\n{_chain(back)}\n"
                   "  Fix: break the circle (move what both need into a lower module), then import it at module level")
        elif target > source:
            fix = "Fix: move what it needs to a lower layer, or move the code that needs it up"
        else:
            fix = "Fix: import it at module level: no circle stops it"
        problems.append(f"{edge.where}: {edge.source} imports {edge.target} ({what}: {layers[target][0]}) inside a "
                        f"function; {fix}")
    return problems


def test_no_module_level_circle():
    problems = circle_problems(ROOT, PACKAGE)
    assert not problems, "\n".join(problems)


def test_every_module_has_a_layer():
    missing = [name for name in modules(ROOT, PACKAGE) if layer_of(name) is None]
    assert not missing, (f"modules of no layer: {', '.join(missing)}. Fix: add each (or its package) to LAYERS in "
                         f"{Path(__file__).relative_to(ROOT)}, in the layer its imports put it")


def test_module_level_imports_go_down_the_layers():
    problems = up_problems(ROOT, PACKAGE)
    assert not problems, "\n".join(problems)


def test_no_function_level_import_up_or_sideways():
    problems = function_problems(ROOT, PACKAGE)
    assert not problems, "\n".join(problems)


def test_each_allowed_import_is_there():
    """An entry of ALLOWED whose import is gone (fixed) is dropped."""
    made = {(edge.file, edge.target) for edge in imports(ROOT, PACKAGE) if edge.in_function}
    stale = [f"{file} -> {module}" for file, module, _ in ALLOWED if (file, module) not in made]
    assert not stale, f"ALLOWED lists imports no function makes: {', '.join(stale)}. Fix: drop them from ALLOWED"


# --- the checker, on a small package of its own -----------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


SYNTHETIC_LAYERS = (("low", ("pkg.low",), "imports nothing"),
                    ("high", ("pkg", "pkg.high", "pkg.other"), "imports low"))


def test_the_checker_finds_a_module_level_circle(tmp_path: Path):
    root = _tree(tmp_path, {
        "pkg/__init__.py": "from . import low, high\n",
        "pkg/low.py": "from pkg.high import X\n",
        "pkg/high.py": "import pkg.low\nX = 1\n",
    })
    [problem] = circle_problems(root, "pkg")
    assert "pkg/low.py:1: pkg.low imports pkg.high" in problem and "pkg/high.py:1: pkg.high imports pkg.low" in problem
    assert "Fix:" in problem


def test_the_checker_leaves_what_does_not_run_at_import(tmp_path: Path):
    root = _tree(tmp_path, {
        "pkg/__init__.py": "from .low import Y\n",  # an __init__ gathering its submodules' names
        "pkg/low.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.high import X\nY = 1\n",
        "pkg/high.py": "from pkg.low import Y\nX = 1\ndef f():\n    import pkg.low\n",
    })
    assert circle_problems(root, "pkg") == []
    assert function_problems(root, "pkg", SYNTHETIC_LAYERS, ()) == []  # down the layers: fine


def test_the_checker_finds_a_function_level_import_that_dodges_a_circle(tmp_path: Path):
    root = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low.py": "def f():\n    from pkg.high import X\n    return X\n",
        "pkg/high.py": "from pkg import low\nX = 1\n",
        "pkg/other.py": "def g():\n    from . import high\n",
    })
    problems = function_problems(root, "pkg", SYNTHETIC_LAYERS, ())
    assert len(problems) == 2
    assert problems[0].startswith("pkg/low.py:2: pkg.low imports pkg.high (of a higher layer: high) inside a function")
    assert "dodges a circle" in problems[0] and "pkg/high.py:1: pkg.high imports pkg.low" in problems[0]
    assert problems[1].startswith("pkg/other.py:2: pkg.other imports pkg.high (of its own layer: high)")
    assert "Fix: import it at module level" in problems[1]
    assert function_problems(root, "pkg", SYNTHETIC_LAYERS, (("pkg/low.py", "pkg.high", "why"),
                                                               ("pkg/other.py", "pkg.high", "why"))) == []
    [up] = up_problems(_tree(tmp_path, {"pkg/low.py": "from pkg import high\n"}), "pkg", SYNTHETIC_LAYERS)
    assert up.startswith("pkg/low.py:1: pkg.low (layer low) imports pkg.high (layer high, higher) at module level")


@pytest.mark.parametrize("module, layer", [("agentcompass", "foundations"), ("agentcompass.cli.run", "cli"),
                                           ("agentcompass.pipeline.reading", "files"),
                                           ("agentcompass.pipeline.bodies", "pipeline")])
def test_a_module_takes_the_layer_of_its_longest_prefix(module: str, layer: str):
    number = layer_of(module)
    assert number is not None and LAYERS[number][0] == layer
