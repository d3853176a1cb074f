"""Plug-ins and declared dependencies: a real package, pip-installed, used by the real CLI and Snakemake.

Each plug-in is installed into a folder of its own that only the processes of the tests asking for it
have on their path (PYTHONPATH): never into the venv, where a broken plug-in would break every test
running beside them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from agentcompass.benchmarks.example_exact_match import ExampleExactMatchBenchmark
from agentcompass.harnesses.mini_swe_agent import MiniSweAgentConfig, MiniSweAgentHarness
from agentcompass.plugins import PluginError, _load, load_components
from agentcompass.runtime.dependencies import DependencySpec, missing_dependencies
from agentcompass.runtime.registry import BENCHMARKS
from conftest import agentcompass, clean_env

TINY = "agentcompass-tiny-plugin"
BROKEN = "agentcompass-broken-plugin"
MISSING_PIP = "pip install agentcompass-no-such-package==9.9"

TINY_ENTRY_POINTS = """
    [agentcompass.benchmarks]
    tiny = ac_tiny_plugin.tiny:TinyBenchmark
    needs_missing = ac_tiny_plugin.needs_missing
    [agentcompass.scanners]
    says_paris = ac_tiny_plugin.scanner:SaysParis
    """
TINY_FILES = {
    "ac_tiny_plugin/__init__.py": "",
    # a class named by its entry point, registered by the loader
    "ac_tiny_plugin/tiny.py": """
        from agentcompass.benchmarks.example_exact_match import ExampleExactMatchBenchmark
        from agentcompass.runtime import TaskSpec


        class TinyBenchmark(ExampleExactMatchBenchmark):
            \"\"\"One question, from a plug-in.\"\"\"

            id = "plugin_tiny"

            def load_tasks(self, req):
                return [TaskSpec(task_id="one-plus-one", question="1+1?", category="plugin", ground_truth="2",
                                 metadata={"dataset_revision": "plugin-v1"})]
        """,
    # a transcript scanner (the scan stage), registered by the loader
    "ac_tiny_plugin/scanner.py": """
        from agentcompass.runtime import BaseScanner, ScanEvidence


        class SaysParis(BaseScanner):
            \"\"\"Flags an answer of Paris, from a plug-in.\"\"\"

            id = "plugin_says_paris"
            category = "paris"

            def scan(self, transcript, config):
                paris = transcript.answer == "Paris"
                return self.finding(paris, 1.0 if paris else 0.0, [ScanEvidence(quote="Paris")] if paris else [])
        """,
    # a module named by its entry point, which registers its component itself
    "ac_tiny_plugin/needs_missing.py": f"""
        from agentcompass.runtime import BENCHMARKS
        from agentcompass.runtime.dependencies import DependencySpec
        from ac_tiny_plugin.tiny import TinyBenchmark


        @BENCHMARKS.register()
        class NeedsMissing(TinyBenchmark):
            \"\"\"Needs a package that does not exist.\"\"\"

            id = "plugin_needs_missing"
            dependencies = (DependencySpec(extra="nothing", imports=("agentcompass_no_such_module",),
                                           pip="{MISSING_PIP}"),)
        """,
}

BROKEN_ENTRY_POINTS = """
    [agentcompass.harnesses]
    shaky = ac_broken_plugin:Shaky
    """
BROKEN_FILES = {
    "ac_broken_plugin/__init__.py": "import agentcompass_no_such_module\n",
}


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=600)


def wheel(folder: Path, name: str, files: dict[str, str], entry_points: str) -> Path:
    """A wheel of ``files`` with its entry points, written directly (no build backend is needed)."""
    info = f"{name.replace('-', '_')}-0.1.0.dist-info"
    contents = {rel: textwrap.dedent(text).lstrip() for rel, text in files.items()}
    contents[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n"
    contents[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    contents[f"{info}/entry_points.txt"] = textwrap.dedent(entry_points).lstrip()
    record = [f"{rel},sha256={_digest(text.encode())},{len(text.encode())}" for rel, text in contents.items()]
    contents[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    path = folder / f"{name.replace('-', '_')}-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for rel, text in contents.items():
            archive.writestr(rel, text)
    return path


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def installed(folder: Path, name: str, files: dict[str, str], entry_points: str) -> dict[str, str]:
    """The plug-in installed by pip (no network) into ``folder/site``, and the environment of a process that
    sees it there beside this venv's packages."""
    site = folder / "site"
    done = pip("install", "--no-deps", "--no-index", "--target", str(site), str(wheel(folder, name, files, entry_points)))
    assert done.returncode == 0, done.stdout + done.stderr
    return clean_env(PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))


@pytest.fixture(scope="module")
def tiny_plugin(tmp_path_factory) -> dict[str, str]:
    """The environment of a process that has the tiny plug-in installed."""
    return installed(tmp_path_factory.mktemp("tiny-plugin"), TINY, TINY_FILES, TINY_ENTRY_POINTS)


@pytest.fixture
def broken_plugin(tmp_path) -> dict[str, str]:
    """The environment of a process that has the broken plug-in installed."""
    return installed(tmp_path, BROKEN, BROKEN_FILES, BROKEN_ENTRY_POINTS)


def test_list_shows_each_component_with_its_package(tiny_plugin, workdir: Path):
    done = agentcompass(workdir, "list", "benchmark", env=tiny_plugin)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines() if line.strip()}
    assert rows["plugin_tiny"] == TINY
    assert rows["plugin_needs_missing"] == TINY
    assert rows["example_exact_match"] == "built-in"


def test_a_plugin_benchmark_runs_through_snakemake(tiny_plugin, workdir: Path):
    done = agentcompass(workdir, "run", "plugin_tiny", "oracle", "none", "--cores", "1", env=tiny_plugin)
    assert done.returncode == 0, done.stdout + done.stderr
    run = workdir / "results/default/plugin_tiny-oracle-none"
    (result,) = run.glob("attempts/*/*/result.json")
    assert json.loads(result.read_text())["score"] == 1.0
    assert json.loads((run / "metrics.json").read_text())["metrics"]["accuracy"] == 1.0


def test_a_plugin_scanner_is_listed_and_writes_its_finding_in_scan_json(tiny_plugin, workdir: Path):
    listed = agentcompass(workdir, "list", "scanner", env=tiny_plugin)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split()[1] for line in listed.stdout.splitlines() if line.strip()}
    assert rows["plugin_says_paris"] == TINY and rows["grader_access"] == "built-in"
    done = agentcompass(workdir, "run", "example_exact_match", "oracle", "none", "-b", "limit=1", "--cores", "1",
                        "--scanner", "plugin_says_paris", env=tiny_plugin)
    assert done.returncode == 0, done.stdout + done.stderr
    (scan,) = workdir.glob("results/default/*/attempts/*/*/scan.json")
    finding = json.loads(scan.read_text())["scanners"][0]
    assert finding["id"] == "plugin_says_paris" and finding["category"] == "paris" and finding["flagged"] is True


def test_a_missing_dependency_fails_before_any_job_with_the_pip_command(tiny_plugin, workdir: Path):
    done = agentcompass(workdir, "run", "plugin_needs_missing", "oracle", "none", "--cores", "1", env=tiny_plugin)
    assert done.returncode == 2, done.stdout + done.stderr
    assert MISSING_PIP in done.stderr
    assert "agentcompass_no_such_module" in done.stderr and "Traceback" not in done.stderr
    assert not (workdir / "results").exists(), "no job ran"


def test_a_broken_plugin_is_a_clear_error_naming_package_and_entry_point(broken_plugin, workdir: Path):
    for args in (("list", "harness"), ("run", "example_exact_match", "oracle", "none")):
        done = agentcompass(workdir, *args, env=broken_plugin)
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"plug-in package {BROKEN!r}: entry point 'shaky'" in done.stderr
        assert "agentcompass_no_such_module" in done.stderr and "Traceback" not in done.stderr
    assert not (workdir / "results").exists()


def test_an_entry_point_naming_a_class_of_another_kind_is_refused():
    wrong = EntryPoint("wrong", "agentcompass.benchmarks.example_exact_match:ExampleExactMatchBenchmark",
                       "agentcompass.harnesses")
    with pytest.raises(PluginError, match="entry point 'wrong'.*is not a BaseHarness subclass"):
        _load("harness", wrong)


class DuplicateBfcl(ExampleExactMatchBenchmark):
    id = "bfcl"


def test_an_entry_point_taking_a_built_in_id_is_refused():
    load_components()
    duplicate = EntryPoint("dup", f"{__name__}:DuplicateBfcl", "agentcompass.benchmarks")
    with pytest.raises(PluginError, match="entry point 'dup'.*benchmark id 'bfcl' is registered twice"):
        _load("benchmark", duplicate)
    assert BENCHMARKS.get("bfcl") is not DuplicateBfcl


def test_dependency_spec_finds_missing_modules_without_importing_them():
    spec = DependencySpec(extra="x", imports=("json", "agentcompass_no_such_module", "agentcompass_nope.sub"), pip="pip x")
    assert spec.missing() == ("agentcompass_no_such_module", "agentcompass_nope.sub")
    assert missing_dependencies((DependencySpec(extra="y", imports=("json",), pip="pip y"), spec)) == (spec,)


def test_mini_swe_agent_needs_its_package_only_for_the_default_program():
    harness = MiniSweAgentHarness()
    assert harness.required_dependencies(MiniSweAgentConfig()) == harness.dependencies
    assert harness.required_dependencies(MiniSweAgentConfig(executable="/opt/mini")) == ()
