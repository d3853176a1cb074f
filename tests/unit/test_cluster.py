"""agentcompass.pipeline.cluster without a cluster: sinfo's output, the plugin's CPU rule, the
sentences that stop a run. tests/test_slurm.py runs the check against a real cluster."""

from __future__ import annotations

import pytest

from agentcompass.pipeline.cluster import JobRequest, Partition, parse_sinfo, plugin_cpus, sinfo_minutes, why_never_starts


@pytest.mark.parametrize("limit, minutes", [
    ("infinite", None), ("UNLIMITED", None), ("n/a", None),
    ("30", 30), ("30:00", 30), ("30:01", 31), ("2:00:00", 120), ("1-00:00:00", 1440),
    ("1-12:30:00", 2190), ("2-06", 3240), ("1-01:30", 1530),
])
def test_sinfo_time_limits_in_minutes(limit, minutes):
    assert sinfo_minutes(limit) == minutes


def test_the_largest_node_and_the_time_limit_of_a_partition():
    assert parse_sinfo("debug", "2 infinite\n") == Partition("debug", 2, None)
    assert parse_sinfo("short", "16 30:00\n64+ 30:00\n8 30:00\n") == Partition("short", 64, 30)
    assert parse_sinfo("gone", "") is None


def test_the_cpus_a_job_asks_are_cpus_per_task_when_given_else_its_threads():
    assert plugin_cpus({}, 4) == (4, "set-threads: shard")
    assert plugin_cpus({"cpus_per_task": 1}, 4) == (1, "set-resources: shard: cpus_per_task")
    # the plugin asks at least one; below zero it asks none, and SLURM gives one
    assert plugin_cpus({"cpus_per_task": 0}, 4)[0] == 1
    assert plugin_cpus({"cpus_per_task": -1}, 4)[0] == 1


def job(cpus=1, minutes=60, cpus_from="set-resources: shard: cpus_per_task"):
    return JobRequest("debug", cpus, cpus_from, minutes, False)


def test_a_job_some_node_can_run_goes_through():
    assert why_never_starts(job(cpus=2, minutes=60), Partition("debug", 2, 60)) is None
    assert why_never_starts(job(cpus=1, minutes=None), Partition("debug", 2, 30)) is None
    assert why_never_starts(job(minutes=10_000), Partition("debug", 2, None)) is None


def test_a_job_no_node_can_run_is_stopped_with_the_setting_to_edit():
    too_many = why_never_starts(job(cpus=4, cpus_from="set-threads: shard"), Partition("debug", 2, None))
    assert too_many.startswith("A shard's cluster job asks SLURM for 4 CPUs (set-threads: shard in your SLURM profile)")
    assert "no node of partition 'debug' has more than 2" in too_many
    assert "Set set-resources: shard: cpus_per_task to 2 or less" in too_many

    too_long = why_never_starts(job(minutes=60), Partition("debug", 2, 30))
    assert "asks SLURM for 60 minutes (default-resources: runtime in your SLURM profile)" in too_long
    assert "allows at most 30" in too_long and "Set runtime to 30 or less" in too_long

    nowhere = why_never_starts(job(), Partition("nosuch", 0, None))
    assert "partition 'nosuch', which has no nodes" in nowhere and "slurm_partition" in nowhere
