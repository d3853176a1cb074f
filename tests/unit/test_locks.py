"""The folder lock: a run that finds a folder taken names the run that holds it."""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from pathlib import Path

import pytest

from agentcompass.pipeline import locks


def test_a_lock_taken_before_its_holder_wrote_itself_in_still_names_the_holder(tmp_path: Path):
    """The holder takes the lock, then writes who it is: a run refused in between waits for the name."""
    path = tmp_path / locks.LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # another open file: its flock conflicts with acquire's
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        holder = {"host": "elsewhere", "pid": 4242, "since": time.time(), "command": "snakemake"}
        late = threading.Timer(0.2, lambda: os.pwrite(fd, json.dumps(holder).encode() + b"\n", 0))
        late.start()
        with pytest.raises(locks.RunHeldError) as busy:
            locks.acquire(tmp_path)
        late.join()
    finally:
        os.close(fd)
    assert busy.value.holder is not None and busy.value.holder.pid == 4242
    assert "pid 4242" in str(busy.value)
