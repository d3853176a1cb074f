"""The one id-to-path function and the result layout."""

from __future__ import annotations

import hashlib
import urllib.parse
from pathlib import Path

MAX_SEGMENT_BYTES = 200
# a namespace, a run id (a request's name by default): one path segment each, whole, so the
# files and temporary files written beside and inside them stay within a file name's 255 bytes
MAX_NAME_CHARS = 240


def task_segment(task_id: str) -> str:
    """A task id as one path segment: percent-encoded, cut and hashed past 200 bytes."""
    segment = urllib.parse.quote(task_id, safe="")
    if segment in (".", ".."):
        segment = segment.replace(".", "%2E")
    if len(segment.encode()) > MAX_SEGMENT_BYTES:
        digest = hashlib.sha256(task_id.encode()).hexdigest()[:16]
        head = segment[: MAX_SEGMENT_BYTES - len(digest) - 1]
        # never cut inside a %XX escape
        cut = head.rfind("%")
        if cut >= len(head) - 2:
            head = head[:cut]
        segment = f"{head}~{digest}"
    return segment


def run_dir(results_dir: str | Path, namespace: str, run_id: str) -> Path:
    return Path(results_dir) / namespace / run_id


def attempt_dir(results_dir: str | Path, namespace: str, run_id: str, task_id: str, attempt: int) -> Path:
    return run_dir(results_dir, namespace, run_id) / "attempts" / task_segment(task_id) / str(attempt)
