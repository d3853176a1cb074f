"""What a session leaves on the machine, how it is marked, and how it is found again.

Every host process a session starts carries markers in its environment: the
session, the command, the owner (the agentcompass process that opened the
session, with its start time so a reused PID is not mistaken for it) and the
session's label (run, task, attempt, phase). Markers survive ``setsid`` and
double forks, which a process group does not; so a timeout or ``close()``
ends every descendant, and ``agentcompass clean`` finds what a killed run
left behind. A host workspace has a record beside it (``<workspace>.session``)
until its session closes; containers carry the same facts as Docker labels.
The bubblewrap sandboxes' folder of empty masks (``agentcompass-mask-*``, one
per process that opened a sandbox) holds a record of its owner
(``MASK_RECORD``), so ``clean`` removes the folder of an owner that is gone.
Each provider removes its own sessions' leftovers (its ``clean_leftovers``):
``clean`` calls that of every registered provider, and imports none.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import time
from pathlib import Path
from typing import Collection

from agentcompass._util.trees import remove_tree
from agentcompass.runtime.base import CleanReport
from agentcompass.runtime.registry import ENVIRONMENTS

SESSION_VAR = "AGENTCOMPASS_SESSION"
EXEC_VAR = "AGENTCOMPASS_EXEC"
OWNER_VAR = "AGENTCOMPASS_OWNER"
LABEL_VAR = "AGENTCOMPASS_LABEL"

_KILL_ROUNDS = 50


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: fields start after the last ')'
    return stat.rsplit(")", 1)[1].split()[19]


def owner_token() -> str:
    """This process, as ``host:pid:start_time``."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_time(pid)}"


def owner_alive(token: str) -> bool:
    """False only when ``token`` names a process of this machine that is gone."""
    host, _, rest = token.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's process: not ours to judge
    return _start_time(int(pid)) == started


def environment_markers(pid: int) -> dict[str, str]:
    """The agentcompass markers in ``pid``'s environment (empty if none or unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    markers = {}
    for entry in raw.split(b"\0"):
        if entry.startswith(b"AGENTCOMPASS_"):
            key, _, value = entry.partition(b"=")
            markers[key.decode(errors="replace")] = value.decode(errors="replace")
    return markers


def _pids() -> list[int]:
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]


_PF_KTHREAD = 0x00200000
_EXEC_REREADS = 20


def _environ(pid: int) -> bytes | None:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None


def _kernel_thread(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # gone: nothing to read again
    return bool(int(stat.rsplit(")", 1)[1].split()[6]) & _PF_KTHREAD)


def marked_processes(var: str, value: str) -> list[int]:
    """Processes whose environment holds ``var=value``.

    A process in the middle of ``execve`` shows an empty environment for a
    moment (its new memory is in place, its environment not yet): such a
    process is read again, a millisecond apart, so a scan does not miss it.
    """
    needle = f"{var}={value}".encode()
    found = []
    pending = _pids()
    for round_ in range(_EXEC_REREADS + 1):
        empty = []
        for pid in pending:
            raw = _environ(pid)
            if raw is None:
                continue
            if needle in raw.split(b"\0"):
                found.append(pid)
            elif not raw and not _kernel_thread(pid):
                empty.append(pid)
        if not empty or round_ == _EXEC_REREADS:
            break
        pending = empty
        time.sleep(0.001)
    return sorted(found)


def kill_marked(var: str, value: str, spare: Collection[int] = ()) -> int:
    """SIGKILL every process marked ``var=value`` but those in ``spare``, again until a scan finds none (forks race)."""
    killed = 0
    for _ in range(_KILL_ROUNDS):
        pids = [pid for pid in marked_processes(var, value) if pid not in spare]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
    return killed


SESSION_RECORD_SUFFIX = ".session"


def record_session(workspace: Path, label: str) -> None:
    """Note beside ``workspace`` who opened it; ``forget_session`` removes the note at close."""
    record = {"owner": owner_token(), "label": label}
    Path(f"{workspace}{SESSION_RECORD_SUFFIX}").write_text(json.dumps(record))


def forget_session(workspace: Path) -> None:
    Path(f"{workspace}{SESSION_RECORD_SUFFIX}").unlink(missing_ok=True)


MASK_PREFIX = "agentcompass-mask-"
MASK_RECORD = "owner"


def record_owner(folder: str) -> None:
    """Note in ``folder`` (a sandbox folder of this process, before it is locked) which process made it."""
    fd = os.open(os.path.join(folder, MASK_RECORD), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
    with os.fdopen(fd, "w") as record:
        record.write(json.dumps({"owner": owner_token()}))


def label_selected(label: str, run_id: str | None) -> bool:
    # a session label is "<run_id>-<task>-<attempt>-<phase>"
    return run_id is None or label.startswith(f"{run_id}-")


def clean_processes(run_id: str | None, include_live: bool, dry_run: bool, report: CleanReport) -> None:
    for pid in _pids():
        markers = environment_markers(pid)
        owner = markers.get(OWNER_VAR)
        if owner is None or not label_selected(markers.get(LABEL_VAR, ""), run_id):
            continue
        if not include_live and owner_alive(owner):
            continue
        report.processes.append(f"process {pid} of {markers.get(LABEL_VAR, '?')} (owner {owner})")
        if not dry_run:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def clean_workspaces(root: Path, run_id: str | None, include_live: bool, dry_run: bool, report: CleanReport) -> None:
    """Workspaces under ``root`` whose session never closed (kept ones have no record left)."""
    for record_path in sorted(root.glob(f"agentcompass-*{SESSION_RECORD_SUFFIX}")):
        try:
            record = json.loads(record_path.read_text())
        except (OSError, ValueError):
            continue
        if not label_selected(record.get("label", ""), run_id):
            continue
        if not include_live and owner_alive(record.get("owner", "")):
            continue
        workspace = Path(str(record_path)[: -len(SESSION_RECORD_SUFFIX)])
        report.workspaces.append(f"workspace {workspace} of {record.get('label', '?')}")
        if not dry_run:
            remove_tree(workspace, ignore_errors=True)
            record_path.unlink(missing_ok=True)


def clean_sandbox_folders(root: Path, dry_run: bool, report: CleanReport) -> None:
    """The bubblewrap sandboxes' folders under ``root`` (``agentcompass-mask-*``) whose owner is gone: only
    folders of this user, never through a link, and only those whose record names a dead process of this
    machine (a folder without one, of an earlier version, is left). They belong to a process, not to a
    run: whatever ``--run`` says, and never while their owner lives (its sandboxes bind them)."""
    uid = os.getuid()
    for path in sorted(root.glob(f"{MASK_PREFIX}*")):
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
            continue
        try:
            fd = os.open(path / MASK_RECORD, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            with os.fdopen(fd) as record_file:
                record = json.loads(record_file.read(4096))
        except (OSError, ValueError):
            continue
        owner = record.get("owner") if isinstance(record, dict) else None
        if not isinstance(owner, str) or owner_alive(owner):
            continue
        report.folders.append(f"sandbox folder {path} (owner {owner})")
        if not dry_run:
            remove_tree(path, ignore_errors=True)


def clean(run_id: str | None = None, include_live: bool = False, dry_run: bool = False) -> CleanReport:
    """Remove what sessions of dead agentcompass processes left: each registered Environment provider's
    ``clean_leftovers``, once per class (host_process: processes, workspaces and the sandboxes' folders;
    docker: containers).

    ``run_id`` limits it to one run's sessions; ``include_live`` also takes those
    whose owner still runs (and containers kept on purpose by retention).
    """
    report = CleanReport()
    for provider in dict.fromkeys(cls for _, cls in ENVIRONMENTS.items()):
        provider.clean_leftovers(run_id, include_live, dry_run, report)
    return report
