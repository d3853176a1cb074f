"""The suite's tiers (tests/conftest.py): what marks a test, and what fails a test that lacks its mark."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import conftest


def test_a_test_in_the_fast_tier_that_starts_a_workflow_fails_naming_the_fixture_to_request(request):
    assert request.node.get_closest_marker("e2e") is None
    with pytest.raises(pytest.fail.Exception, match=r"runs X but is not marked 'e2e': request one of the fixtures \["):
        conftest.require_tier("e2e", "runs X")
    # and the helpers that start one call it before starting anything
    with pytest.raises(pytest.fail.Exception, match="runs a Snakemake workflow but is not marked 'e2e'"):
        conftest.snakemake(Path("/nonexistent"), "--version")
    with pytest.raises(pytest.fail.Exception, match="runs the agentcompass command but is not marked 'e2e'"):
        conftest.agentcompass(Path("/nonexistent"), "--version")


def test_asking_for_a_docker_engine_outside_the_docker_tier_fails():
    from environments.envkit import require_docker

    with pytest.raises(pytest.fail.Exception, match="uses a Docker engine but is not marked 'docker'"):
        require_docker()


def test_the_fixtures_a_test_requests_mark_it(request, tmp_path):
    item = request.node
    assert conftest.markers_from_fixtures(item) == set()  # tmp_path and request mark nothing
    assert conftest.tier_of(item) == "default"
    fixtures = item.fixturenames
    try:
        item.fixturenames = [*fixtures, "workdir", "needs_docker"]
        assert conftest.markers_from_fixtures(item) == {"e2e", "docker"}
        item.fixturenames = [*fixtures, "cluster"]
        assert conftest.markers_from_fixtures(item) == {"slurm", "e2e"}
    finally:
        item.fixturenames = fixtures


@pytest.mark.parametrize("provider", ["host_process", "docker"])
def test_a_parametrized_value_marks_its_case_only(request, provider):
    marked = request.node.get_closest_marker("docker") is not None
    assert marked == (provider == "docker")


def test_a_tests_own_tier_is_the_first_of_the_order_it_carries(request):
    item = request.node
    assert conftest.tier_of(item) == "default"
    for marks, tier in [(["e2e"], "e2e"), (["docker", "e2e"], "docker"), (["e2e", "slurm", "docker"], "slurm"),
                        (["browser", "e2e"], "browser"), (["podman", "docker"], "podman"),
                        (["smoke", "e2e"], "default"), (["slow"], "slow"), (["docker", "agents"], "agents"),
                        (["agents", "slurm"], "slurm")]:
        saved = list(item.own_markers)
        try:
            for name in marks:
                item.add_marker(name)
            assert conftest.tier_of(item) == tier, marks
        finally:
            item.own_markers[:] = saved
    # the default run's -m expression names the same markers
    assert conftest.DEFAULT_SELECTION == "smoke or not (podman or browser or slurm or agents or docker or e2e or slow)"


def test_a_snakemake_run_is_found_three_levels_down_and_no_deeper(tmp_path):
    assert conftest._snakemake_ran_under(tmp_path) is None
    deep = tmp_path / "a" / "b" / "c" / "d"
    (deep / ".snakemake" / "log").mkdir(parents=True)
    assert conftest._snakemake_ran_under(tmp_path) is None
    (deep.parent / ".snakemake" / "log").mkdir(parents=True)
    assert conftest._snakemake_ran_under(tmp_path) == deep.parent
    # a .snakemake folder without a run's log (a test's own fake records) is no run
    (tmp_path / "fake" / ".snakemake" / "metadata").mkdir(parents=True)
    assert conftest._snakemake_ran_under(tmp_path / "fake") is None
    # the teardown check would take the run's log made above for a run of this test's: not e2e, it fails
    shutil.rmtree(tmp_path / "a")
