"""Replay: rebuild a finished run from its call cache alone, and say whether every attempt reproduced.

``replay(run_folder)`` builds the run's request again, as it was recorded in
its ``request.json``, into a sibling run folder (``<run_id>-replay``) with
``execution.cache: replay`` and reuse off: every stage is rebuilt, the run and
evaluate stages answering each model call from the cache and never from the
endpoint (the key is not needed). Each attempt is then one of:

- ``reproduced``: the replay's answer, score, verdict and status are the original's;
- ``diverged``: a call of the replay was not the original's call at that place
  (``first_difference`` says how: a tool output that changed, another request
  body), or the calls matched and the answer or score differs;
- ``missing``: the replay made the original's call, and the cache holds no
  reply for it (an entry pruned or deleted; a run made with the cache off).

The summary is printed, and written to ``replay.json`` in the replay's folder.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from agentcompass import layout, results
from agentcompass._util.jsonio import write_json
from agentcompass.errors import AgentCompassError
from agentcompass.runtime.models import RunRequest
from agentcompass.runtime.models.codec import ContractError, from_dict

REPLAY_SUFFIX = "-replay"
SUMMARY = "replay.json"
# the most of a text a reason quotes
QUOTE = 80
# the trajectory lines read of one attempt (a line is at most a few MiB: records are cut past RECORD_LIMIT)
MOST_LINES = 100_000


class ReplayError(AgentCompassError, ValueError):
    """A run that cannot be replayed (no request.json, a folder that is no run): what and how to fix."""


def replay_request(run_folder: Path) -> RunRequest:
    """The request of ``run_folder`` (its request.json) as its replay builds it."""
    request_file = Path(layout.request_file(run_folder))
    try:
        data = results.read_json(request_file)
        req = from_dict(RunRequest, data, str(request_file))
    except FileNotFoundError:
        raise ReplayError(f"{run_folder} holds no request.json: it is not a run folder "
                          "(give results/<namespace>/<run_id> of a finished run)") from None
    except (OSError, ValueError, ContractError) as exc:
        raise ReplayError(f"{request_file} cannot be read: {exc}") from None
    run_id = f"{req.run_id[:layout.MAX_NAME_CHARS - len(REPLAY_SUFFIX)]}{REPLAY_SUFFIX}"
    return dataclasses.replace(
        req,
        execution=dataclasses.replace(req.execution, cache="replay"),
        runtime=dataclasses.replace(req.runtime, reuse=False),  # every stage rebuilt, each replay anew
        output=dataclasses.replace(req.output, run_id=run_id),
        metadata=dataclasses.replace(req.metadata, request_name=f"{req.metadata.request_name}{REPLAY_SUFFIX}"),
    )


def _calls(trajectory: Path) -> dict[str, list[dict[str, Any]]]:
    """The model calls of an attempt's trajectory that went through the cache, by stage, in order: one per
    key (the first line of each; a call's retries repeat it)."""
    by_stage: dict[str, list[dict[str, Any]]] = {}
    seen: set[str] = set()
    try:
        with open(trajectory, encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle):
                if number >= MOST_LINES:
                    break
                try:
                    record = json.loads(line)
                except (ValueError, RecursionError):  # a body the agent nested past the parser: not a call of ours
                    continue
                cache = record.get("cache") if isinstance(record, dict) else None
                if not isinstance(cache, dict) or not isinstance(cache.get("key"), str) or cache["key"] in seen:
                    continue
                seen.add(cache["key"])
                by_stage.setdefault(str(cache.get("stage")), []).append(record)
    except OSError:
        pass
    return by_stage


def _quote(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    return repr(text if len(text) <= QUOTE else text[:QUOTE] + "...")


def _tool_output(item: Any) -> str | None:
    """The tool call a conversation item answers, when it is a tool's output (chat's ``tool`` message, an
    Anthropic ``tool_result`` block, a Responses ``function_call_output``); else None."""
    if not isinstance(item, dict):
        return None
    if item.get("role") == "tool":
        return str(item.get("tool_call_id") or "?")
    if item.get("type") == "function_call_output":
        return str(item.get("call_id") or "?")
    content = item.get("content")
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                return str(block.get("tool_use_id") or "?")
    return None


def first_difference(original: Any, replayed: Any) -> str:
    """Why two request bodies differ, at their first difference: a tool output that changed, another
    message, or another field."""
    if not (isinstance(original, dict) and isinstance(replayed, dict)):
        return "the request body differs"
    if "agentcompass_cut" in original or "agentcompass_cut" in replayed:
        return "the request body differs (too large for the trajectory to hold whole, so not compared further)"
    for field in ("messages", "input"):
        before, after = original.get(field), replayed.get(field)
        if isinstance(before, list) and isinstance(after, list) and before != after:
            for index, (a, b) in enumerate(zip(before, after)):
                if a != b:
                    tool = _tool_output(a)
                    if tool is not None:
                        return (f"a tool output changed: {field}[{index}] (the output of tool call {tool}) was "
                                f"{_quote(a.get('content', a))} and is now {_quote(b.get('content', b) if isinstance(b, dict) else b)}")
                    role = a.get("role") if isinstance(a, dict) else None
                    return f"the request body differs at {field}[{index}]" + (f" (a {role} message)" if role else "")
            return (f"the request body differs in its {field}: {len(before)} items were sent before, "
                    f"{len(after)} now")
    for name in sorted(set(original) | set(replayed)):
        if original.get(name) != replayed.get(name):
            return f"the request body differs in its field {name!r}"
    return "the request body differs"


def classify(original: dict[str, Any], replayed: dict[str, Any], original_dir: Path, replay_dir: Path) -> dict[str, Any]:
    """How one attempt's replay went: ``reproduced``, ``diverged`` or ``missing``, and why."""
    miss = (replayed.get("metadata") or {}).get("cache_miss")
    if isinstance(miss, dict):
        stage, number = str(miss.get("stage")), int(miss.get("call") or 0)
        before = _calls(original_dir / layout.TRAJECTORY).get(stage, [])
        now = _calls(replay_dir / layout.TRAJECTORY).get(stage, [])
        where = f"model call {number} of the {stage} stage"
        if not before:
            return {"outcome": "missing", "call": number, "stage": stage,
                    "why": f"{where}: the original run kept none of its calls in the call cache (its "
                           "execution.cache was off, or its trajectory is gone)"}
        if number <= len(before) and (before[number - 1].get("cache") or {}).get("key") == miss.get("key"):
            return {"outcome": "missing", "call": number, "stage": stage,
                    "why": f"{where}: the original made this call, and the cache holds no reply for it "
                           "(pruned or deleted)"}
        if number > len(before):
            return {"outcome": "diverged", "call": number, "stage": stage,
                    "why": f"{where}: the original made only {len(before)} calls in that stage"}
        replayed_call = now[number - 1] if number <= len(now) else {}
        return {"outcome": "diverged", "call": number, "stage": stage,
                "why": f"{where}: " + first_difference(before[number - 1].get("request"), replayed_call.get("request"))}
    differs = [name for name in ("status", "answer", "score", "correct") if original.get(name) != replayed.get(name)]
    if not differs:
        return {"outcome": "reproduced"}
    shown = ", ".join(f"{name} {_quote(original.get(name))} -> {_quote(replayed.get(name))}" for name in differs)
    return {"outcome": "diverged", "why": f"every call was answered from the cache, and the result differs: {shown}"}


def summarize(original: Path, replay: Path) -> dict[str, Any]:
    """Each attempt of ``original`` against its replay in ``replay``: the counts, and every attempt that
    did not reproduce, with why."""
    run = results.open_run(original)
    counts = {"reproduced": 0, "diverged": 0, "missing": 0, "not_finished": 0}
    attempts = []
    for task, number, folder in run.attempts():
        segment = layout.task_segment(task["task_id"])
        replay_dir = Path(layout.attempt_folder(replay, segment, number))
        before_file, after_file = Path(layout.result_file(folder)), Path(layout.result_file(replay_dir))
        if not before_file.exists() or not after_file.exists():
            outcome = {"outcome": "not_finished", "why": "the original has no result.json" if not before_file.exists()
                       else "the replay wrote no result.json"}
        else:
            outcome = classify(results.read_json(before_file), results.read_json(after_file), Path(folder), replay_dir)
        counts[outcome["outcome"]] += 1
        if outcome["outcome"] != "reproduced":
            attempts.append({"task_id": task["task_id"], "attempt": number, **outcome})
    return {"original": str(original), "replay": str(replay), "attempts": sum(counts.values()), **counts,
            "reproduced_all": counts["reproduced"] == sum(counts.values()), "not_reproduced": attempts}


def write_summary(summary: dict[str, Any], replay: Path) -> Path:
    return write_json(replay / SUMMARY, summary)


def summary_lines(summary: dict[str, Any], most: int = 20) -> list[str]:
    """The summary as the command prints it: one line of counts, then each attempt that did not reproduce."""
    head = (f"replay of {summary['original']}: {summary['attempts']} attempts: {summary['reproduced']} reproduced, "
            f"{summary['diverged']} diverged, {summary['missing']} missing entries"
            + (f", {summary['not_finished']} not finished" if summary["not_finished"] else "")
            + f" -> {Path(summary['replay']) / SUMMARY}")
    lines = [head]
    for item in summary["not_reproduced"][:most]:
        lines.append(f"  {item['outcome']}: {item['task_id']} #{item['attempt']}: {item['why']}")
    if len(summary["not_reproduced"]) > most:
        lines.append(f"  ... and {len(summary['not_reproduced']) - most} more in {SUMMARY}")
    return lines

