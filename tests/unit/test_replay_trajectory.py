"""replay's reading of a trajectory: what the agent put in a request never stops it (a body nested past the
parser, a line that is no JSON), and each call counts once, its retries not again."""

from __future__ import annotations

import json
from pathlib import Path

from agentcompass import replay


def test_a_trajectory_line_nested_past_the_parser_or_not_json_is_skipped(tmp_path: Path):
    trajectory = tmp_path / "trajectory.jsonl"
    call = {"type": "model_call", "cache": {"key": "k1", "stage": "run"}, "request": {"messages": []}}
    nested = '{"type": "model_call", "cache": {"key": "k2", "stage": "run"}, "request": ' + "[" * 100_000 + "]" * 100_000 + "}"
    trajectory.write_text("\n".join([json.dumps(call), nested, "not json", json.dumps(call),
                                     json.dumps({**call, "cache": {"key": "k3", "stage": "run"}})]) + "\n")
    calls = replay._calls(trajectory)
    assert [c["cache"]["key"] for c in calls["run"]] == ["k1", "k3"]
