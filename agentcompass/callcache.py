"""The call cache: every model call's reply, kept by what determined it, shared by every job of a run.

A reply is determined by the endpoint (its URL without credentials, query or
fragment), the model id, the protocol and path of the call, the request body
as sent (canonical JSON: its messages, tools and parameters, less the fields
that name a session rather than ask anything, ``VOLATILE``), the attempt's
number, the stage that calls (``run``, ``evaluate`` for a judge, ``scan`` for a scanner's), and which
occurrence of that same request in the stage's run of the attempt it is. That
is the key (``CallKey``), and nothing else: a rerun of an attempt gets back the
replies of its first run in order, while two attempts, or two identical calls
of one attempt, stay separate samples.

The mode (``execution.cache``) decides what a call does with it (``MODES``):
``off`` never looks; ``on`` answers from an entry when there is one, else
calls the endpoint and keeps the reply; ``refresh`` always calls and keeps;
``replay`` answers from entries alone, and a call with no entry is the
attempt's error naming the call (``miss_message``), never a call to the endpoint.
The mode is not a param of any file: switching it reruns nothing that is built.

The store (``CallStore``) is a folder of one JSON file per entry, named by the
key's digest (``<results>/.call-cache`` unless ``runtime.cache_dir`` says
otherwise). Processes, shards and SLURM jobs that see the folder share it,
with no server: an entry is written to a temporary file and renamed into
place, so two writers of one key each leave a whole entry and a reader sees a
whole one or none. An entry that is not whole (torn, edited, another key's,
larger than ``ENTRY_LIMIT``, a link) is a miss, never an error or a wrong
reply. Only answered calls are kept (HTTP 200); a stream is kept as its whole
body and replayed as it came. Each entry is scrubbed of the secrets the job
holds before it is written (the key never reaches it: requests are keyed as
configured, their ``${VAR}`` references unresolved, and the gateway's replies
are scrubbed before anything sees them); a request is keyed scrubbed the same
way, so the calls after a reply that said a secret keep their keys when that
reply is served from its entry.

Hits are counted in the store's ``hits.log`` (one short line each, appended);
``agentcompass cache`` shows entries, size and hits and prunes, oldest-used
first (a hit renews an entry's time), to ``runtime.cache_max_bytes`` or
``runtime.cache_max_age_days``.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import hashlib
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

MODES = ("off", "on", "refresh", "replay")
# The store's folder under a results folder (a namespace starts with a letter or digit: never this).
CACHE_FOLDER = ".call-cache"
HITS_LOG = "hits.log"
ENTRY_FORMAT = 1
# The largest entry read: a reply is at most the client's and gateway's REPLY_LIMIT (8 MiB), kept as JSON text
# (escaped) or base64; an entry larger than this is a miss.
ENTRY_LIMIT = 24 << 20
# Fields of a request that name a session or a user, not what is asked: left out of the key, so an agent that
# sends a new session id with each run still finds its calls. Anthropic's ``metadata`` (Claude Code's user and
# session id), the Responses API's ``prompt_cache_key`` (Codex's conversation id), chat's ``user``.
VOLATILE = ("metadata", "prompt_cache_key", "user", "safety_identifier")


def cache_mode(value: Any) -> str:
    """``execution.cache`` as one of ``MODES``: YAML reads ``on`` and ``off`` as true and false, so those are
    taken too; None is off."""
    if value is None or value is False:
        return "off"
    if value is True:
        return "on"
    if isinstance(value, str) and value in MODES:
        return value
    raise ValueError(f"execution.cache must be one of {', '.join(MODES)}, got {value!r}")


def cache_root(results_dir: str | Path, cache_dir: str | Path | None = None) -> Path:
    """The store's folder: ``cache_dir`` when set, else ``CACHE_FOLDER`` in the results folder."""
    return Path(cache_dir) if cache_dir else Path(results_dir) / CACHE_FOLDER


def endpoint_of(url: str) -> str:
    """An endpoint as keys name it: scheme, host, port and path, without credentials, query or fragment."""
    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme.lower(), host.lower(), parts.path.rstrip("/"), "", ""))


def request_digest(body: Any, scrub: Callable[[str], str] | None = None) -> str:
    """The digest of a request body as keys hold it: canonical JSON of a JSON object less ``VOLATILE``;
    of anything else (bytes that are no JSON object), the bytes themselves. ``scrub`` (the one entries are
    written with) turns the secrets the body holds into their references first: a conversation that holds a
    reply which said a secret has the same key whether that reply was received (the value) or served from an
    entry (the reference, as the entry keeps it)."""
    if isinstance(body, (bytes, bytearray)):
        try:
            parsed = json.loads(body)
        except (ValueError, RecursionError):
            parsed = None
        if not isinstance(parsed, dict):
            raw = bytes(body)
            if scrub is not None:
                raw = scrub(raw.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
            return hashlib.sha256(raw).hexdigest()
        body = parsed
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in VOLATILE}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    if scrub is not None:
        text = scrub(text)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class CallKey:
    """What determines a reply (see the module's docstring); ``digest`` names its entry."""

    endpoint: str
    model: str
    protocol: str
    path: str
    request: str  # request_digest of the body
    attempt: int
    stage: str
    occurrence: int

    @property
    def digest(self) -> str:
        text = json.dumps([ENTRY_FORMAT, self.endpoint, self.model, self.protocol, self.path, self.request,
                           self.attempt, self.stage, self.occurrence], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def describe(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "model": self.model, "protocol": self.protocol, "path": self.path,
                "request": self.request, "attempt": self.attempt, "stage": self.stage,
                "occurrence": self.occurrence}


@dataclass
class Entry:
    """A kept reply: its status, content type and body as the caller received them, and its token counts."""

    status: int
    content_type: str
    body: bytes
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_seconds: float = 0.0


class CallStore:
    """The entries under ``root``: one file per key, ``<root>/<digest[:2]>/<digest>.json``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, digest: str) -> Path:
        return self.root / digest[:2] / f"{digest}.json"

    def read(self, key: CallKey) -> Entry | None:
        """The entry of ``key``; None when there is none or it is not whole (a miss, never an error)."""
        digest = key.digest
        try:
            fd = os.open(self.path(digest), os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as handle:
                data = handle.read(ENTRY_LIMIT + 1)
            if len(data) > ENTRY_LIMIT:
                return None
            raw = json.loads(data)
            body = base64.b64decode(raw["body_base64"], validate=True) if "body_base64" in raw \
                else raw["body"].encode("utf-8")
            if (raw.get("format") != ENTRY_FORMAT or raw.get("key") != digest
                    or raw.get("body_sha256") != hashlib.sha256(body).hexdigest()):
                return None
            return Entry(status=int(raw["status"]), content_type=str(raw["content_type"]), body=body,
                         prompt_tokens=int(raw.get("prompt_tokens") or 0),
                         completion_tokens=int(raw.get("completion_tokens") or 0),
                         latency_seconds=float(raw.get("latency_seconds") or 0.0))
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
            return None

    def write(self, key: CallKey, entry: Entry, scrub: Callable[[str], str] | None = None) -> None:
        """Keep ``entry`` as ``key``'s, whole or not at all (a temporary file renamed into place). ``scrub``
        rewrites the body's text (the secrets it must not hold)."""
        digest = key.digest
        try:  # a body of text is kept as text (scrubbed); one that is no UTF-8, as base64
            text: str | None = entry.body.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and scrub is not None:
            text = scrub(text)
        body = entry.body if text is None else text.encode("utf-8")
        kept = {"body": text} if text is not None else {"body_base64": base64.b64encode(body).decode()}
        record = {
            "format": ENTRY_FORMAT, "key": digest, **{f"key_{k}": v for k, v in key.describe().items()},
            "status": entry.status, "content_type": entry.content_type, **kept,
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "prompt_tokens": entry.prompt_tokens, "completion_tokens": entry.completion_tokens,
            "latency_seconds": round(entry.latency_seconds, 6), "created": time.time(),
        }
        data = json.dumps(record, sort_keys=True, ensure_ascii=False).encode("utf-8")
        path = self.path(digest)
        tmp = path.parent / f".{digest}.{os.getpid()}-{threading.get_ident()}-{secrets.token_hex(4)}.tmp"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except OSError:  # a full disk, a folder not ours: the call stands, only uncached
            with contextlib.suppress(OSError):
                tmp.unlink()

    def hit(self, key: CallKey) -> None:
        """Count a hit (one line of ``HITS_LOG``) and renew the entry's time, which pruning goes by."""
        digest = key.digest
        try:
            os.utime(self.path(digest))
            fd = os.open(self.root / HITS_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            try:
                os.write(fd, f"{digest}\n".encode())
            finally:
                os.close(fd)
        except OSError:
            pass

    def entries(self) -> Iterator[tuple[Path, int, float]]:
        """Every entry file: its path, size and time (of its last write or hit)."""
        if not self.root.is_dir():
            return
        for folder in sorted(self.root.iterdir()):
            if len(folder.name) != 2 or folder.is_symlink() or not folder.is_dir():
                continue
            for path in sorted(folder.iterdir()):
                if path.suffix != ".json" or path.name.startswith("."):
                    continue
                try:
                    stat = path.lstat()
                except OSError:
                    continue
                yield path, stat.st_size, stat.st_mtime

    def hits(self) -> dict[str, int]:
        """Hits per entry digest, from ``HITS_LOG``: a line is a digest (one hit) or a digest and a count (the
        hits a prune folded into one line)."""
        counts: dict[str, int] = {}
        try:
            with open(self.root / HITS_LOG, "rb") as handle:
                for line in handle:
                    digest, _, number = line.strip().decode(errors="replace").partition(" ")
                    counts[digest] = counts.get(digest, 0) + (int(number) if number.isdigit() else 1)
        except OSError:
            pass
        return counts

    def stats(self) -> dict[str, Any]:
        """Entries, their bytes, hits, and the times of the oldest and newest entry."""
        sizes, times = [], []
        for _, size, mtime in self.entries():
            sizes.append(size)
            times.append(mtime)
        return {"root": str(self.root), "entries": len(sizes), "bytes": sum(sizes),
                "hits": sum(self.hits().values()), "oldest": min(times) if times else None,
                "newest": max(times) if times else None}

    def prune(self, max_bytes: int | None = None, max_age_seconds: float | None = None,
              now: float | None = None) -> tuple[int, int]:
        """Remove entries older than ``max_age_seconds`` (by their last write or hit), then the oldest until
        the rest hold at most ``max_bytes``; the hits of removed entries go from ``HITS_LOG``, and the rest are
        folded into one line per entry (a hit logged while the log is rewritten may be lost). Returns the
        entries removed and the bytes freed."""
        now = time.time() if now is None else now
        found = sorted(self.entries(), key=lambda item: item[2])
        total = sum(size for _, size, _ in found)
        removed: set[str] = set()
        freed = 0
        for path, size, mtime in found:
            too_old = max_age_seconds is not None and now - mtime > max_age_seconds
            too_big = max_bytes is not None and total - freed > max_bytes
            if not (too_old or too_big):
                continue
            try:
                path.unlink()
            except OSError:
                continue
            removed.add(path.stem)
            freed += size
        for folder in self.root.iterdir() if self.root.is_dir() else ():  # temporary files of killed writers
            if len(folder.name) == 2 and folder.is_dir() and not folder.is_symlink():
                for tmp in folder.glob(".*.tmp"):
                    try:
                        if now - tmp.lstat().st_mtime > 3600:
                            tmp.unlink()
                    except OSError:
                        pass
        if removed or (self.root / HITS_LOG).exists():  # the log folded: one line per entry, whatever its hits
            kept = {d: n for d, n in self.hits().items() if d not in removed}
            lines = "".join(f"{d} {n}\n" for d, n in kept.items())
            log = self.root / HITS_LOG
            tmp = log.with_name(f".{HITS_LOG}.{os.getpid()}.tmp")
            try:
                tmp.write_text(lines)
                os.replace(tmp, log)
            except OSError:
                tmp.unlink(missing_ok=True)
        return len(removed), freed


def miss_message(miss: dict[str, Any]) -> str:
    """The error of a replay's call the cache holds no reply for (``AttemptCalls.missed``)."""
    return (f"replay: model call {miss['call']} of the {miss['stage']} stage (POST {miss['path']}, request "
            f"{miss['request'][:12]}, occurrence {miss['occurrence']}) has no entry in the call cache, and "
            "execution.cache: replay never calls the endpoint")


@dataclass
class AttemptCalls:
    """One stage's view of the cache while it runs one attempt: the mode, the key of each call (counting
    occurrences and calls), the hits, and the misses of a replay. Thread-safe: a gateway calls from its own
    threads."""

    store: CallStore
    mode: str
    attempt: int
    stage: str
    scrub: Callable[[str], str] | None = None
    calls: int = 0
    hits: int = 0
    misses: list[dict[str, Any]] = field(default_factory=list)
    _seen: dict[tuple, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def restart(self) -> None:
        """A new try of the attempt (a runtime retry): its calls are counted from the first again."""
        with self._lock:
            self._seen.clear()
            self.calls = 0

    def key(self, *, endpoint: str, model: str, protocol: str, path: str, body: Any) -> CallKey:
        """The key of the next call of this request, counted as its next occurrence."""
        digest = request_digest(body, self.scrub)
        what = (endpoint_of(endpoint), model, protocol, path, digest)
        with self._lock:
            occurrence = self._seen.get(what, 0)
            self._seen[what] = occurrence + 1
            self.calls += 1
        return CallKey(*what, attempt=self.attempt, stage=self.stage, occurrence=occurrence)

    def lookup(self, key: CallKey) -> Entry | None:
        """The entry that answers the call, in modes that read (``on``, ``replay``); counted as a hit."""
        if self.mode not in ("on", "replay"):
            return None
        entry = self.store.read(key)
        if entry is not None:
            self.store.hit(key)
            with self._lock:
                self.hits += 1
        return entry

    def keep(self, key: CallKey, entry: Entry) -> None:
        """Keep an answered call's reply, in modes that write (``on``, ``refresh``)."""
        if self.mode in ("on", "refresh") and entry.status == 200:
            self.store.write(key, entry, self.scrub)

    @property
    def replaying(self) -> bool:
        return self.mode == "replay"

    def missed(self, key: CallKey) -> dict[str, Any]:
        """Record a replay's call with no entry: what the attempt's error and the replay summary name."""
        with self._lock:
            miss = {"call": self.calls, "stage": self.stage, "path": key.path, "request": key.request,
                    "occurrence": key.occurrence, "key": key.digest}
            self.misses.append(miss)
        return miss

    def record(self, key: CallKey, served: str) -> dict[str, Any]:
        """The ``cache`` field of a call's trajectory line: its key, and whether it was a ``hit``, a ``miss``
        or ``sent`` to the endpoint."""
        return {"key": key.digest, "request": key.request, "occurrence": key.occurrence, "stage": key.stage,
                "served": served}


# The cache view of the attempt stage being run, set by the run and evaluate stages: every ModelClient and
# model gateway made while it is set reads and writes the cache through it.
ATTEMPT_CALLS: contextvars.ContextVar[AttemptCalls | None] = contextvars.ContextVar("attempt_calls", default=None)
