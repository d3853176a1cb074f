"""plans.json written one plan at a time, and its index: where each plan is in it.

At 100,000 attempts plans.json is about 100 MB. A shard's inner run builds 500
of them, and the outer run needs, for each shard, a digest of its slice's task
and plan objects (``AttemptFingerprints.shard``): parsing the whole file for
either cost every such process seconds of CPU and half a gigabyte. The index,
``plans.index`` beside plans.json (``layout.PLAN_INDEX``), holds, for each
attempt in plans.json's order, its task segment, its attempt number and the
byte span of its plan's JSON text in plans.json, and each shard's digest for
one shard size; a reader seeks to the plans it needs.

It is derived data, not an output of a rule: the rules, the stage table and
Snakemake's records do not know it, so a results folder written before it
existed is reused as it is. It names the size and modification time of the
plans.json it describes (and of the tasks.json its digests were made from): an
index that is missing, stale, truncated or garbled is built again from
plans.json, and written when the folder can be written, never trusted nor a
reason to fail. The plans job writes it just after plans.json. The file is
the SHA-256 of its JSON text on a line, then the text: a file cut short or
garbled does not match its digest and is not read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from agentcompass import layout
from agentcompass._util.jsonio import atomic_file, canonical_json, interrupted_writes, write_bytes_atomic
from agentcompass._util.logs import LOG
from agentcompass.layout import task_segment
from agentcompass.runtime.models import ExecutionPlan
from agentcompass.secrets import Scrubber

from . import reuse
from .files import FileSchemaError, PlansFile, checks_writes_of, validate_payload

VERSION = 1  # of the index's own layout: an index of another version is built again

Key = tuple[str, int]  # (task segment, attempt)
Stamp = tuple[int, int]  # a file's size and modification time (ns): the version of it an index describes


def file_stamp(path: str | Path) -> Stamp:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def index_file(plans_path: str | Path) -> str:
    return layout.plan_index_file(os.path.dirname(os.fspath(plans_path)) or ".")


@dataclass(frozen=True)
class PlanIndex:
    """Where each plan of one version of a plans.json is, and its shards' digests.

    ``shards`` are the digests of the slices of ``shard_size`` attempts in plans.json's
    order (none when ``shard_size`` is 0), made from the tasks.json of stamp ``tasks``.
    """

    path: str  # the plans.json
    plans: Stamp
    keys: list[Key]
    offsets: list[int]
    lengths: list[int]
    shard_size: int = 0
    tasks: Stamp | None = None
    shards: list[str] = field(default_factory=list)
    built: bool = False  # built from plans.json by this process, rather than read from the index file

    @cached_property
    def positions(self) -> dict[Key, int]:
        return {key: i for i, key in enumerate(self.keys)}

    def read(self, keys: Iterable[Key]) -> dict[Key, dict] | None:
        """The plan objects of ``keys``, read at their spans (in file order) and checked to be theirs;
        None when the index does not describe the file (an entry lost, a span that holds another
        plan, the file replaced since): it is then built again."""
        try:
            order = sorted((self.positions[key] for key in keys))
        except KeyError as exc:
            if not self.built:
                return None
            raise KeyError(f"no plan of task segment {exc.args[0][0]!r}, attempt {exc.args[0][1]} in "
                           f"{self.path}") from None
        plans = {}
        with open(self.path, "rb") as handle:
            st = os.fstat(handle.fileno())
            if (st.st_size, st.st_mtime_ns) != self.plans:
                return None
            for i in order:
                handle.seek(self.offsets[i])
                try:
                    plan = json.loads(handle.read(self.lengths[i]))
                    key = (task_segment(plan["task_id"]), plan["attempt"])
                except (ValueError, TypeError, KeyError):
                    return None
                if key != self.keys[i]:
                    return None
                plans[key] = plan
        return plans

    def digests_current(self, tasks: Stamp, shard_size: int) -> bool:
        return self.shard_size == shard_size and self.tasks == tasks

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION, "plans": list(self.plans),
            "segments": [s for s, _ in self.keys], "attempts": [a for _, a in self.keys],
            "offsets": self.offsets, "lengths": self.lengths,
            "shard_size": self.shard_size, "tasks": list(self.tasks) if self.tasks else None, "shards": self.shards,
        }


# -- reading -----------------------------------------------------------------------------------

_lock = threading.Lock()  # a job's plan is read in Snakemake's job threads
_held: dict[str, PlanIndex] = {}


def load(plans_path: str | Path) -> PlanIndex:
    """The index of plans.json as it is now: read from its file, or built again (and written)."""
    path = os.fspath(plans_path)
    stamp = file_stamp(path)
    index = _held.get(path)
    if index is None or index.plans != stamp:
        with _lock:
            index = _held.get(path)
            if index is None or index.plans != stamp:
                index = _read(path, stamp) or _rebuild(path)
    return index


def read_plans(plans_path: str | Path, keys: Iterable[Key]) -> dict[Key, dict]:
    """The plan objects of ``keys`` in plans.json, by key, read through the index: only theirs are parsed."""
    keys = list(keys)
    plans = load(plans_path).read(keys)
    if plans is None:
        with _lock:
            plans = _rebuild(os.fspath(plans_path)).read(keys)
    if plans is None:  # built from the file just now
        raise ValueError(f"{plans_path} was replaced while it was read; run again")
    return plans


def shard_digest(plans_path: str | Path, tasks_path: str | Path, shard_size: int, shard: int,
                 attempts: Sequence[Key], raw_tasks: Callable[[], Mapping[str, dict]]) -> str:
    """``reuse.digest([[task, plan] ...])`` of the raw task and plan objects of ``attempts``, shard
    ``shard``'s slice of ``shard_size``: from the index, whose digests are made again when they are of
    another shard size or tasks.json. ``raw_tasks`` gives tasks.json's objects by segment (when needed)."""
    index = load(plans_path)
    tasks = file_stamp(tasks_path)
    if not index.digests_current(tasks, shard_size):
        index = _with_digests(index, tasks, shard_size, raw_tasks())
    start = shard * shard_size
    if shard < len(index.shards) and index.keys[start:start + shard_size] == list(attempts):
        return index.shards[shard]
    # a slice that is not one of plans.json's (its order disagrees with tasks.json's): digested as it is
    return slice_digest(attempts, raw_tasks(), read_plans(plans_path, attempts))


def slice_digest(attempts: Iterable[Key], tasks: Mapping[str, dict], plans: Mapping[Key, dict]) -> str:
    """What the shard's param holds of its slice: its raw task and plan objects, digested."""
    return reuse.digest([[tasks[segment], plans[(segment, attempt)]] for segment, attempt in attempts])


def _read(path: str, stamp: Stamp) -> PlanIndex | None:
    """The index in its file, if it is whole and describes plans.json of ``stamp``; else None."""
    try:
        with open(index_file(path), "rb") as handle:
            index = _parsed(path, _decoded(handle.read()))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    if index is None or index.plans != stamp:
        return None
    _held[path] = index
    return index


def _encoded(data: dict[str, Any]) -> bytes:
    """The index file: the SHA-256 of its JSON text, then the text; a file whose text does not match
    its digest (cut short, garbled) is not read."""
    text = json.dumps(data, separators=(",", ":")).encode()
    return hashlib.sha256(text).hexdigest().encode() + b"\n" + text + b"\n"


def _decoded(data: bytes) -> Any:
    check, _, text = data.partition(b"\n")
    text = text.removesuffix(b"\n")
    return json.loads(text) if hashlib.sha256(text).hexdigest().encode() == check else None


def _parsed(path: str, data: Any) -> PlanIndex | None:
    """An index from its file's JSON, or None when it is not one of this version. A file that matches
    its digest was written whole, but its lists are checked too (their lengths, types and spans within
    plans.json): a wrong index costs a rebuild, never a wrong plan."""
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return None
    plans, segments, attempts = _stamp(data["plans"]), data["segments"], data["attempts"]
    offsets, lengths, size, shards = data["offsets"], data["lengths"], data["shard_size"], data["shards"]
    tasks = None if data["tasks"] is None else _stamp(data["tasks"])
    lists = (segments, attempts, offsets, lengths, shards)
    if plans is None or not all(isinstance(v, list) for v in lists) or not _count(size):
        return None
    if not len(segments) == len(attempts) == len(offsets) == len(lengths):
        return None
    if len(shards) != (-(-len(segments) // size) if size else 0) or (size and tasks is None):
        return None
    end = 0
    for segment, attempt, offset, length in zip(segments, attempts, offsets, lengths):
        if not (isinstance(segment, str) and _count(attempt) and _count(offset) and _count(length)) \
                or offset < end:
            return None
        end = offset + length
    if end > plans[0] or not all(isinstance(s, str) and len(s) == 20 for s in shards):
        return None
    return PlanIndex(path, plans, list(zip(segments, attempts)), offsets, lengths, size, tasks, shards)


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _stamp(value: Any) -> Stamp | None:
    if isinstance(value, list) and len(value) == 2 and all(_count(v) for v in value):
        return value[0], value[1]
    return None


# -- building it again from plans.json ---------------------------------------------------------


def _rebuild(path: str) -> PlanIndex:
    """The index of plans.json as it is now, from the file itself; written beside it (no digests)."""
    with open(path, "rb") as handle:
        st = os.fstat(handle.fileno())
        data = handle.read()
    text = data.decode("utf-8")
    same_width = data.isascii()  # then a character's offset is its byte's
    keys, offsets, lengths = [], [], []
    at_char = at_byte = 0
    for plan, start, end in _plans_in(text):
        keys.append((task_segment(plan["task_id"]), plan["attempt"]))
        if same_width:
            offsets.append(start)
            lengths.append(end - start)
        else:
            at_byte += len(text[at_char:start].encode())
            offsets.append(at_byte)
            lengths.append(len(text[start:end].encode()))
            at_byte += lengths[-1]
            at_char = end
    index = PlanIndex(path, (st.st_size, st.st_mtime_ns), keys, offsets, lengths, built=True)
    _keep(index)
    return index


_SPACE = re.compile(r"[ \t\n\r]*")


def _plans_in(text: str) -> Iterator[tuple[dict, int, int]]:
    """Each plan object of a plans file's JSON text, with its span (in characters), in order.

    The top-level object's other values are skipped: any valid layout of the file is read, not
    only the canonical writer's.
    """
    decode = json.JSONDecoder().raw_decode

    def skip(pos: int) -> int:
        return _SPACE.match(text, pos).end()  # type: ignore[union-attr]  # it matches anywhere, if only ""

    def past(pos: int, char: str) -> int:
        """The position after ``char``, expected as the next character from ``pos`` that is not a space."""
        pos = skip(pos)
        if not text.startswith(char, pos):
            raise ValueError(f"not a plans file: {char!r} expected at character {pos}")
        return pos + 1

    def next_is(pos: int, char: str) -> bool:
        return text.startswith(char, skip(pos))

    pos = past(0, "{")
    more = not next_is(pos, "}")
    while more:
        key, pos = decode(text, skip(pos))
        pos = skip(past(pos, ":"))
        if key != "plans":
            pos = decode(text, pos)[1]
        else:
            pos = past(pos, "[")
            plans = not next_is(pos, "]")
            while plans:
                start = skip(pos)
                plan, pos = decode(text, start)
                yield plan, start, pos
                plans = next_is(pos, ",")
                pos = past(pos, ",") if plans else pos
            pos = past(pos, "]")
        more = next_is(pos, ",")
        pos = past(pos, ",") if more else pos
    past(pos, "}")


def _with_digests(index: PlanIndex, tasks: Stamp, shard_size: int, raw_tasks: Mapping[str, dict]) -> PlanIndex:
    """``index`` with the digests of its slices of ``shard_size``, made from plans.json a slice at a time."""
    with _lock:
        held = _held.get(index.path)
        if held is not None and held.plans == index.plans and held.digests_current(tasks, shard_size):
            return held  # another thread made them
        shards = _digests(index, shard_size, raw_tasks)
        if shards is None:  # the index does not describe the file: once more with one built from it
            index = _rebuild(index.path)
            shards = _digests(index, shard_size, raw_tasks)
        if shards is None:
            raise ValueError(f"{index.path} was replaced while it was read; run again")
        index = dataclasses.replace(index, shard_size=shard_size, tasks=tasks, shards=shards)
        _keep(index)
        return index


def _digests(index: PlanIndex, shard_size: int, raw_tasks: Mapping[str, dict]) -> list[str] | None:
    shards = []
    for start in range(0, len(index.keys), shard_size) if shard_size else ():
        attempts = index.keys[start:start + shard_size]
        plans = index.read(attempts)
        if plans is None:
            return None
        shards.append(slice_digest(attempts, raw_tasks, plans))
    return shards


def _keep(index: PlanIndex) -> None:
    """Hold ``index`` for this process and write it beside its plans.json (if the folder can be written)."""
    _held[index.path] = index
    out = index_file(index.path)
    try:
        for leftover in interrupted_writes(out):  # of a write killed before its rename
            leftover.unlink(missing_ok=True)
        write_bytes_atomic(out, _encoded(index.to_json()))
    except OSError as exc:  # derived data: a reader builds it again
        LOG.debug(f"the index of {index.path} was not written ({type(exc).__name__}: {exc})")


# -- writing plans.json ------------------------------------------------------------------------

_ITEM = "\n    "  # a plan's lines in plans.json: at the depth of an item of the top object's "plans" list


def write_plans(path: str | Path, kind: str, request_name: str, plans: Iterable[ExecutionPlan], *,
                tasks_path: str | Path, raw_tasks: Mapping[str, dict], shard_size: int) -> None:
    """Write plans.json, one plan at a time, then its index (with the digests of its slices of
    ``shard_size`` attempts, made from ``raw_tasks``, tasks.json's objects by segment).

    The file is byte for byte what ``files.write_file(kind, path, PlansFile(request_name, plans))``
    writes: each plan is checked against the file's schema when that checks it (``files.checks_writes_of``)
    and scrubbed of secrets as that does,
    and the text is canonical JSON (sorted keys, an indent of 2), atomic, recorded just before it
    appears. Only one plan is held at a time, and the slice of a shard for its digest.
    """
    envelope = PlansFile(request_name, []).to_dict()
    checked = checks_writes_of(kind)  # as write_file checks the file
    if checked:
        validate_payload(kind, envelope)
    scrubber = Scrubber()  # one for the file, as write_file makes one
    head, empty, tail = canonical_json(scrubber.value(envelope)).partition('"plans": []')
    assert empty, "the plans file's top-level object holds its plans list"
    keys: list[Key] = []
    offsets: list[int] = []
    lengths: list[int] = []
    shards: list[str] = []
    pending: list[list[dict]] = []  # [task, plan] of the slice being digested
    with atomic_file(path) as out:
        written = out.write(f'{head}"plans": ['.encode())
        for plan in plans:
            payload = plan.to_dict()
            if checked:
                try:
                    validate_payload(kind, {**envelope, "plans": [payload]})
                except FileSchemaError as exc:
                    raise FileSchemaError(f"{exc} (the plan of task {plan.task_id!r}, attempt {plan.attempt})") \
                        from None
            payload = scrubber.value(payload)
            data = json.dumps(payload, sort_keys=True, ensure_ascii=False, indent=2,
                              allow_nan=False).replace("\n", _ITEM).encode()
            written += out.write(("," if keys else "").encode() + _ITEM.encode())
            keys.append((task_segment(plan.task_id), plan.attempt))
            offsets.append(written)
            lengths.append(len(data))
            written += out.write(data)
            if shard_size:
                pending.append([raw_tasks[keys[-1][0]], payload])
                if len(pending) == shard_size:
                    shards.append(reuse.digest(pending))
                    pending = []
        out.write(("\n  ]" if keys else "]").encode() + tail.encode())
    if pending:
        shards.append(reuse.digest(pending))
    _keep(PlanIndex(os.fspath(path), file_stamp(path), keys, offsets, lengths, shard_size,
                    file_stamp(tasks_path) if shard_size else None, shards, built=True))
