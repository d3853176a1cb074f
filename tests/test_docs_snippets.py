"""Every shell and Python snippet of the user guide (docs/) runs as a reader would run it.

The pages are read in the guide's order (mkdocs.yml's nav) and their snippets run one after
another in one folder made by `agentcompass init` (with the clone's `examples/` beside it), as a
reader following the guide would: a later snippet may use what an earlier one built. A block
whose first line is `# PATH` (`# my_eval.yaml`; a `python` block: a `.py` file) is a file's
content: it is written there when its turn comes. One whose first line is `# PATH, after the
NAME row` is a row of the stage table: it is put in the file `PATH` below the `Stage(...)` row of
the stage `NAME`. A model endpoint at `http://127.0.0.1:8000/v1` in a snippet is the stand-in model of
`examples/stand_in_model.py`, served on a free port of 127.0.0.1 for the whole module; a snippet
that starts its own stand-in (`--port 8000`) gets a free port of its own.

An HTML comment on the line before a block says where it runs:

- `<!-- snippet: docker -->` needs a Docker engine: skipped without one, as the environment tests are;
- `<!-- snippet: slurm -->` submits SLURM jobs: only with AGENTCOMPASS_SLURM=1, as tests/test_slurm.py;
- `<!-- snippet: package-index -->` installs from the package index: only with
  AGENTCOMPASS_PACKAGE_INDEX=1, as tests/test_installed.py, in a copy of this clone with a new
  virtual environment first on PATH;
- `<!-- snippet: ci -->` is the test command itself: each of its commands must be one .ci/run runs;
- `<!-- snippet: clone -->` changes the code: it runs in a copy of this clone's files (its tracked
  ones and the changes to them), made once for the module, with that copy's `agentcompass` first
  on PYTHONPATH. Its files are written there (`# rules/usage.smk`), and its commands run at its
  top, so the guide's "Writing a stage" adds a stage to the copy and builds it; this clone is
  never modified.

Every YAML block is loaded (a run config, or a request of one, through the config loader).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, clean_env
from environments.envkit import require_docker

from agentcompass.plugins import load_components
from agentcompass.runtime import load_run_config, resolve_orchestration
from agentcompass.testing.endpoint import ScriptedEndpoint

DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\S*)\s*$")
MODE = re.compile(r"^<!-- snippet: ([\w-]+) -->$")
FILE_LINE = re.compile(r"^# ([\w.-]+(?:/[\w.-]+)*)$")
# a row of the stage table, put below the row of the stage it names
ROW_LINE = re.compile(r"^# ([\w.-]+(?:/[\w.-]+)*), after the (\w+) row$")
RUN = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python"}
# what a block may be fenced as: the runnable kinds, and files and output shown as they are
LANGUAGES = {*RUN, "yaml", "text", "console", "json", "toml", "snakemake"}
MODES = {"run", "docker", "slurm", "package-index", "ci", "clone"}
REQUEST_KEYS = {"benchmark", "harness", "environment", "model", "execution", "runtime", "output", "scanners"}
PACKAGE_INDEX = "AGENTCOMPASS_PACKAGE_INDEX"
SLURM = "AGENTCOMPASS_SLURM"


@dataclass(frozen=True)
class Snippet:
    page: str
    line: int  # of the opening fence
    lang: str
    text: str
    mode: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def file(self) -> str | None:
        """The path a block that shows a file's content (or a row of one) names on its first line."""
        first = self.text.split("\n", 1)[0]
        match = FILE_LINE.match(first) or ROW_LINE.match(first)
        if match is None or (self.lang in RUN and not (self.lang == "python" and match.group(1).endswith(".py"))):
            return None
        return match.group(1)

    @property
    def after_row(self) -> str | None:
        """The stage whose row of the stage table this block's row goes below (``# PATH, after the NAME row``)."""
        match = ROW_LINE.match(self.text.split("\n", 1)[0])
        return match.group(2) if match and self.file else None


def nav_pages() -> list[str]:
    def walk(items) -> list[str]:
        pages = []
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            pages += walk(value) if isinstance(value, list) else [value]
        return pages

    return walk(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])


def parse(page: str) -> list[Snippet]:
    """The fenced blocks of a page, each with the mode its preceding comment names."""
    lines = (DOCS / page).read_text().splitlines()
    found: list[Snippet] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        assert end is not None, f"docs/{page}:{i + 1}: a code block is never closed"
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mode = MODE.match(before)
        found.append(Snippet(page, i + 1, opening.group(1), "\n".join(lines[i + 1:end]) + "\n",
                             mode.group(1) if mode else "run"))
        i = end + 1
    return found


SNIPPETS = [s for page in nav_pages() for s in parse(page)]
STEPS = [s for s in SNIPPETS if s.lang in RUN or s.file]
YAMLS = [s for s in SNIPPETS if s.lang == "yaml"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stand_in_reply():
    spec = importlib.util.spec_from_file_location("stand_in_model", ROOT / "examples" / "stand_in_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reply


def localize(text: str, port: int) -> str:
    """The guide's endpoint, 127.0.0.1:8000, as the one this test serves (or a free port, for a
    snippet that starts its own stand-in there)."""
    if "--port 8000" in text:
        return text.replace("8000", str(free_port()))
    return text.replace("127.0.0.1:8000", f"127.0.0.1:{port}")


def copy_clone(folder: Path) -> None:
    """Copy this clone's files into ``folder``: the tracked ones and the changes to them (as they are
    in the working tree), and new files not ignored; not .git, not what is ignored (results, .venv)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():  # a file deleted in the working tree is listed, and left out
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / name)


def insert_row(path: Path, after: str, row: str) -> None:
    """Put ``row`` (lines of a ``Stage(...)`` call, with its trailing comma) below the row of the
    stage ``after`` in the stage table ``path``."""
    import ast

    text = path.read_text()
    ends = [node.end_lineno for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Stage"
            and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == after]
    assert len(ends) == 1, f"{path}: {len(ends)} rows of a stage {after!r} (Stage({after!r}, ...)), not one"
    lines = text.splitlines(keepends=True)
    assert ends[0] is not None and lines[ends[0] - 1].rstrip().endswith("),"), \
        f"{path}:{ends[0]}: the row of {after!r} does not end its line with '),'"
    path.write_text("".join(lines[:ends[0]]) + row + "".join(lines[ends[0]:]))


def run_snippet(snippet: Snippet, cwd: Path, env: dict[str, str], port: int, log: Path) -> None:
    """Run it in its own process group, which is ended afterwards (a server it started with `&`)."""
    text = localize(snippet.text, port)
    argv = ["bash", "-e", "-o", "pipefail", "-c", text] if RUN[snippet.lang] == "bash" else [sys.executable, "-c", text]
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=900)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    output = log.read_text()
    assert code == 0, f"docs/{snippet.id} exited with {code}:\n{text}\n--- output (last 4000 characters):\n{output[-4000:]}"


def commands(text: str) -> list[list[str]]:
    """A shell block's commands, each as words: lines joined, comments dropped, split at &&, || and ;."""
    joined = re.sub(r"\\\n\s*", " ", text)
    found = []
    for line in joined.splitlines():
        for part in re.split(r"&&|\|\||;", line.split(" #", 1)[0] if not line.lstrip().startswith("#") else ""):
            try:
                words = [w for w in shlex.split(part) if w not in ("--quiet", "-q")]
            except ValueError:  # a quoted ';' cut a command of .ci/run in two: not one the guide names
                continue
            if words:
                found.append(words)
    return found


def same_command(doc: list[str], ci: list[str]) -> bool:
    """The same command, where CI may install more extras of this package than the guide names."""
    def extras(word: str) -> tuple[str, set[str]] | None:
        match = re.fullmatch(r"\.\[([\w,-]+)\]", word)
        return (".", set(match.group(1).split(","))) if match else None

    if len(doc) != len(ci):
        return False
    for a, b in zip(doc, ci):
        ea, eb = extras(a), extras(b)
        if a != b and not (ea and eb and ea[1] <= eb[1]):
            return False
    return True


@pytest.fixture(scope="module")
def guide(tmp_path_factory):
    """The reader's folder, the stand-in model and the environment the snippets run with."""
    project = tmp_path_factory.mktemp("guide") / "my-evals"
    subprocess.run([sys.executable, "-m", "agentcompass.cli", "init", str(project)], check=True,
                   env=clean_env(), capture_output=True)
    (project / "examples").symlink_to(ROOT / "examples")
    env = clean_env(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                    OPENAI_API_KEY="sk-docs-snippets")
    with ScriptedEndpoint(stand_in_reply()) as endpoint:
        yield project, env, int(endpoint.base_url.rsplit(":", 1)[1].split("/")[0]), tmp_path_factory.mktemp("logs")


def test_every_block_names_its_kind_and_where_it_runs():
    """A block without a language (or with an unknown one, or mode) would escape this test."""
    wrong = [f"docs/{s.id}: {s.lang or '(none)'} / {s.mode}" for s in SNIPPETS
             if s.lang not in LANGUAGES or s.mode not in MODES]
    assert not wrong, "fence each block as one of " + ", ".join(sorted(LANGUAGES)) + ":\n" + "\n".join(wrong)
    orphans = sorted(p.name for p in DOCS.glob("*.md") if p.name not in nav_pages())
    assert not orphans, f"pages not in mkdocs.yml's nav: {orphans}"


@pytest.fixture(scope="module")
def clone(tmp_path_factory, guide):
    """The copy of this clone the `clone` snippets change and run in, and their environment."""
    _, env, _, _ = guide
    folder = tmp_path_factory.mktemp("clone") / "agentcompass"
    copy_clone(folder)
    env = dict(env, PYTHONPATH=os.pathsep.join([str(folder), *filter(None, [env.get("PYTHONPATH")])]))
    found = subprocess.run([sys.executable, "-c", "import agentcompass; print(agentcompass.__file__)"], cwd=folder,
                           env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(found).is_relative_to(folder), f"the copy's snippets would import {found}, not the copy's package"
    return folder, env


INSTALLS = pytest.mark.slow(reason="installs agentcompass and its dependencies into a new virtual "
                                   "environment from the package index, then runs an evaluation there")


@pytest.mark.parametrize("snippet", [pytest.param(s, marks=INSTALLS) if s.mode == "package-index" else s for s in STEPS],
                         ids=[s.id for s in STEPS])
def test_snippet_runs(snippet: Snippet, guide, tmp_path, request):
    project, env, port, logs = guide
    if snippet.mode == "clone":
        project, env = request.getfixturevalue("clone")
    if snippet.file:
        target = project / snippet.file
        target.parent.mkdir(parents=True, exist_ok=True)
        text = localize(snippet.text, port)
        if snippet.after_row:
            insert_row(target, snippet.after_row, text.split("\n", 1)[1])
        else:
            target.write_text(text)
        return
    log = logs / f"{snippet.page}-{snippet.line}.log"
    if snippet.mode == "ci":
        ci = [c for c in commands((ROOT / ".ci" / "run").read_text())]
        missing = [" ".join(c) for c in commands(snippet.text) if not any(same_command(c, other) for other in ci)]
        assert not missing, f"docs/{snippet.id}: .ci/run does not run {missing}"
        return
    if snippet.mode == "docker":
        require_docker()
    if snippet.mode == "slurm":
        if os.environ.get(SLURM) != "1":
            pytest.skip(f"submits SLURM jobs, so it runs only on a cluster named for it: set {SLURM}=1 "
                        "(.ci/run does, for the cluster it starts with .ci/slurm-up.sh)")
        from test_slurm import cluster_problem

        why = cluster_problem()
        assert why is None, f"{SLURM}=1 names the SLURM cluster on PATH, but {why}"
    if snippet.mode == "package-index":
        if os.environ.get(PACKAGE_INDEX) != "1":
            pytest.skip(f"downloads the dependencies: set {PACKAGE_INDEX}=1 (CI does)")
        clone = tmp_path / "agentcompass"
        copy_clone(clone)
        venv.create(tmp_path / "env", with_pip=True)
        fresh = dict(env, PATH=f"{tmp_path / 'env' / 'bin'}{os.pathsep}{os.environ['PATH']}")
        run_snippet(snippet, clone, fresh, port, log)
        return
    run_snippet(snippet, project, env, port, log)


@pytest.mark.parametrize("snippet", YAMLS, ids=[s.id for s in YAMLS])
def test_yaml_snippet_loads(snippet: Snippet, monkeypatch, tmp_path):
    """A run config, or a request of one, goes through the config loader; anything else parses as a mapping."""
    data = yaml.safe_load(snippet.text)
    assert isinstance(data, dict), f"docs/{snippet.id} is not a mapping of keys"
    if "requests" not in data and not set(data) <= REQUEST_KEYS:
        return  # a profile, a task's settings: YAML of another program
    if "requests" not in data:
        data = {"requests": {"shown": data}}
    # a part of a config shows only what it is about: the rest is the oracle on the example
    data["defaults"] = {"benchmark": "example_exact_match", "harness": "oracle", "model": {"id": "none"},
                        **data.get("defaults", {})}
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-snippets")
    monkeypatch.chdir(ROOT)  # paths in the guide are the clone's (examples/...)
    path = tmp_path / "snippet.yaml"
    path.write_text(yaml.safe_dump(data))
    load_components()
    orchestration = resolve_orchestration(load_run_config([path], include_user=False, include_project=False))
    assert [run.request.run_id for run in orchestration.runs]


def test_readme_quick_start_is_the_guides():
    """The README's two Quick start commands are the Installing page's, which this module runs or checks."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Quick start")
    block = readme[readme.index("```bash", start) + len("```bash\n"):readme.index("```", readme.index("```bash", start) + 3)]
    guide = [s for s in parse("install.md") if s.lang == "bash"][:2]
    assert [s.mode for s in guide] == ["package-index", "ci"]
    assert commands(block) == commands(guide[0].text) + commands(guide[1].text)


def test_readme_links_lead_to_files():
    """The front page's links into the guide (mkdocs checks the guide's own links, not the README's)."""
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    assert targets, "the README links to no page of the guide"
    missing = [t for t in targets if not t.startswith("http") and not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_config_reference_is_the_generated_page():
    spec = importlib.util.spec_from_file_location("gen_config_docs", ROOT / "scripts" / "gen_config_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (DOCS / "config-reference.md").read_text() == module.render(), \
        "docs/config-reference.md is out of date: run python scripts/gen_config_docs.py"
