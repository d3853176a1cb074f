"""A sharded request reads plans.json through its index: the outer run takes each shard's
digest from it, and a shard's inner run reads its own slice's plans only."""

from __future__ import annotations

import json
import os
from pathlib import Path

from agentcompass.pipeline import plan_index
from conftest import jobs_run, jobs_run_with_shards, shard_logs, snakemake

# 12 attempts in shards of 5: slices of 5, 5 and 2
CONFIG = {
    "requests": {"twelve": {"benchmark": {"id": "synthetic", "params": {"num_tasks": 12}}, "harness": "oracle",
                            "model": {"id": "none"}}},
    "runtime": {"shard_size": 5},
}
RUN = "results/default/twelve"


def build(workdir: Path, config: Path) -> dict[str, int]:
    logs = shard_logs(workdir)
    done = snakemake(workdir, "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    return jobs_run_with_shards(workdir, done.stderr, logs)


def scores(workdir: Path) -> dict[str, float]:
    return {p.parent.parent.name: json.loads(p.read_text())["score"]
            for p in sorted((workdir / RUN / "attempts").glob("*/1/result.json"))}


def test_shards_read_plans_json_through_its_index(workdir: Path):
    config = workdir / "eval.yaml"
    config.write_text(json.dumps(CONFIG))
    assert build(workdir, config) == {"request": 1, "tasks": 1, "plans": 1, "shard": 3, "prepare": 12, "run": 12,
                                      "evaluate": 12, "metrics": 1, "report": 1}
    assert scores(workdir) == {f"t{i:02d}": 1.0 for i in range(12)}
    index_file = workdir / RUN / "plans.index"
    index = plan_index._decoded(index_file.read_bytes())
    assert index["shard_size"] == 5 and len(index["shards"]) == 3
    assert [f"{s}/{a}" for s, a in zip(index["segments"], index["attempts"])] == [f"t{i:02d}/1" for i in range(12)]

    # an index deleted (as in a results folder older than it): built again, and nothing reruns
    written = index_file.read_bytes()
    index_file.unlink()
    again = snakemake(workdir, "--configfile", str(config))
    assert again.returncode == 0 and jobs_run(again.stderr) == {}, again.stderr[-3000:]
    assert index_file.read_bytes() == written

    # every plan but the middle slice's blanked out, plans.json's size and time kept: the outer run
    # and the middle shard's inner run read none of them
    plans = workdir / RUN / "plans.json"
    original, st = plans.read_bytes(), plans.stat()
    blanked = bytearray(original)
    for i, (offset, length) in enumerate(zip(index["offsets"], index["lengths"])):
        if not 5 <= i < 10:
            blanked[offset:offset + length] = b" " * length
    plans.write_bytes(bytes(blanked))
    os.utime(plans, ns=(st.st_atime_ns, st.st_mtime_ns))
    for i in range(5, 10):
        (workdir / RUN / "attempts" / f"t{i:02d}" / "1" / "result.json").unlink()
    assert build(workdir, config) == {"shard": 1, "evaluate": 5, "metrics": 1, "report": 1}
    assert scores(workdir) == {f"t{i:02d}": 1.0 for i in range(12)}
    assert json.loads((workdir / RUN / "shards/1/shard.json").read_text())["counts"] == {"completed": 5}
