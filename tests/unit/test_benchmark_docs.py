"""``agentcompass config docs benchmark ID`` documents every parameter of the packaged benchmarks."""

from __future__ import annotations

import dataclasses

import pytest

from agentcompass import cli
from agentcompass.benchmarks import bfcl
from agentcompass.runtime.registry import BENCHMARKS


@pytest.mark.parametrize("benchmark_id", ["humaneval", "bfcl", "majority_vote"])
def test_every_parameter_is_documented_with_a_description(capsys, benchmark_id):
    assert cli.main(["config", "docs", "benchmark", benchmark_id]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [f.name for f in dataclasses.fields(BENCHMARKS.get(benchmark_id).config_class)]
    assert len(names) > 3  # its own parameters besides task_ids, categories and limit
    for name in names:
        index = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{name}:"))
        assert len(lines[index + 1].strip()) > 20, name


def test_bfcl_docs_say_which_categories_are_supported(capsys):
    assert cli.main(["config", "docs", "benchmark", "bfcl"]) == 0
    out = capsys.readouterr().out
    supported, unsupported = out.split("Supported: ")[1].split("Not supported")
    assert all(category in supported for category in bfcl.SUPPORTED)
    assert all(f"{category} (" in unsupported for category in bfcl.UNSUPPORTED)
