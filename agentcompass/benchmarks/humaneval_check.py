"""The program that checks one HumanEval completion, sent on stdin to ``python3 -I -S -`` in the evaluation environment.

A pass is positive evidence: the checker prints this attempt's random token
after ``check(candidate)`` returned, and nothing else can print it. The
completion never runs in the process that holds the token:

- the checker (this source, with the token, the prompt and the tests) execs the
  prompt and the tests, then starts a child ``python3`` that execs the prompt
  plus the completion and serves calls of the entry point over two pipes;
- ``check`` runs in the checker and gets a stand-in for the function: each call
  sends its arguments to the child as tagged JSON and reads back the return
  value, decoded into plain Python data (None, bool, int, float, complex, str,
  bytes, list, tuple, dict, set, range; an iterator arrives as an iterator
  over its items); any other value, a raised exception, or the
  child ending, fails the call and so the check;
- the child has no token, no tests and not the checker's stdout (its stdout is
  the checker's stderr); the checker is marked non-dumpable, so a process of the
  same user cannot read its memory or open its file descriptors through /proc;
  the child gives up every Linux capability and sets no_new_privs before it
  reads the program, since root (CAP_SYS_PTRACE) could read or write any
  process's memory; a child that keeps any refuses to run, and the check fails;
  the child dies with the checker.

The checker loads no code the completion could have written:

- it starts isolated (``-I -S``: no working folder or script folder on
  ``sys.path``, no ``PYTHON*`` variable, no site folder, so no ``.pth`` file,
  ``sitecustomize`` or ``usercustomize``), and keeps only absolute folders on
  ``sys.path``;
- it works in a private folder of its own, and the child in another one;
- everything it needs is imported before the child starts: its own modules
  (``ast`` too, which ``traceback`` imports to underline a failing
  expression), every module the prompt and the tests import anywhere in their
  source, and the prompt and the tests themselves; then it refuses every
  further import (a finder first on ``sys.meta_path``), so a module the
  completion writes where the checker's Python looks (the standard library
  of a root container included) is never loaded by the checker;
- a root checker runs the child as ``nobody`` (65534), so it cannot write
  the root-owned files of the interpreter either, nor signal the checker.

So ending the interpreter (exit, sys.exit, os._exit, SystemExit), patching
builtins, print or sys.stdout, redefining ``check``, or printing a line that
looks like a token only changes the child, and so does a module it writes
(``traceback.py``, ``ast.py``, ``math.py`` or any other, in any folder);
none reaches the checker's stdout
with the token. Only the last line of stdout equal to the token, with exit
status 0, is a pass.
"""

from __future__ import annotations

import ast
import errno
import importlib
import json
import linecache
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Iterator
from typing import Any

_TAGS = ("list", "tuple", "set", "frozenset", "dict", "bytes", "complex", "range", "iterator")


def encode(value: Any) -> Any:
    """``value`` as JSON data; containers are tagged so that their Python types survive."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, complex):
        return {"complex": [value.real, value.imag]}
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": bytes(value).decode("latin-1")}
    if isinstance(value, dict):
        return {"dict": [[encode(k), encode(v)] for k, v in value.items()]}
    for kind in (list, tuple, frozenset, set):
        if isinstance(value, kind):
            return {kind.__name__: [encode(item) for item in value]}
    if isinstance(value, range):
        return {"range": [value.start, value.stop, value.step]}
    if isinstance(value, Iterator):  # a generator, map, zip...: its items, read once as the tests would
        return {"iterator": [encode(item) for item in value]}
    raise TypeError(f"the function returned a {type(value).__name__}, which is not plain data")


def decode(data: Any) -> Any:
    """The inverse of ``encode``; anything else is refused."""
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is not dict or len(data) != 1 or next(iter(data)) not in _TAGS:
        raise ValueError(f"not an encoded value: {str(data)[:200]}")
    (tag, inner), = data.items()
    if tag == "complex":
        return complex(*inner)
    if tag == "bytes":
        return str(inner).encode("latin-1")
    if type(inner) is not list:
        raise ValueError(f"not an encoded {tag}")
    if tag == "dict":
        return {decode(k): decode(v) for k, v in inner}
    if tag == "range":
        return range(*inner)
    if tag == "iterator":
        return iter([decode(item) for item in inner])
    return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](decode(item) for item in inner)


try:  # loaded with the checker, before any completion runs
    import ctypes
except ImportError:  # a Python built without ctypes: no prctl, and a root child refuses to run
    ctypes = None  # type: ignore[assignment]

# The user a root checker runs the completion as: it owns no file of the interpreter and no process of root's.
NOBODY = 65534


def _prctl(option: int, value: int) -> None:
    """prctl(2) where there is one (Linux); elsewhere nothing."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _drop_privileges(as_nobody: bool) -> None:
    """Give up every Linux capability for good (CAP_SYS_PTRACE lets root read any process's memory).

    With ``as_nobody`` (a root checker whose interpreter ``nobody`` can read),
    the process also becomes user and group ``nobody``: root without
    capabilities still owns, and so could rewrite, the interpreter's files.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in range(64):
            if libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:  # PR_CAPBSET_DROP
                break
        if as_nobody:
            try:
                os.setgroups([])
                os.setresgid(NOBODY, NOBODY, NOBODY)
                os.setresuid(NOBODY, NOBODY, NOBODY)
            except OSError:  # a user namespace without that user: root without capabilities, below
                pass
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
        libc.capset(header, (ctypes.c_uint32 * 6)())  # effective, permitted, inheritable: none
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: no exec gains any back
    except (OSError, AttributeError):
        pass
    left = _privileges_left()
    if left:
        raise SystemExit(f"humaneval check: the completion's process could not give up {left}; "
                         "run the evaluation as a user other than root, on Linux")


def _privileges_left() -> str:
    """What of root's power this process still has: '' when none."""
    try:
        with open("/proc/self/status", encoding="utf-8", errors="replace") as status:
            fields = dict(line.split(":", 1) for line in status if ":" in line)
    except OSError:
        return "root" if hasattr(os, "geteuid") and os.geteuid() == 0 else ""
    names = ["CapEff", "CapPrm"] + (["CapBnd"] if os.geteuid() == 0 else [])
    left = [f"its capabilities ({name})" for name in names if int(fields.get(name, "0").strip(), 16)]
    if fields.get("NoNewPrivs", "1").strip() != "1":
        left.append("the right to gain privileges (no_new_privs is not set)")
    return ", ".join(left)


def serve(requests_fd: int, replies_fd: int, as_nobody: bool = False) -> None:
    """The child: exec the program, then answer each call of the entry point with its encoded result."""
    _drop_privileges(as_nobody)
    _prctl(1, 9)  # PR_SET_PDEATHSIG: SIGKILL when the checker ends
    requests = os.fdopen(requests_fd, "r", encoding="utf-8")
    replies = os.fdopen(replies_fd, "w", encoding="utf-8")

    def send(message: dict) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    program, entry_point = json.loads(requests.readline())
    namespace: dict[str, Any] = {"__name__": "completion"}
    try:
        exec(compile(program, "<completion>", "exec", dont_inherit=True), namespace)
        candidate = namespace[entry_point]
    except BaseException as exc:  # noqa: BLE001 - the program's failure is the verdict
        send({"error": f"the program failed: {type(exc).__name__}: {exc}"})
        return
    send({"ready": True})
    for line in requests:
        try:
            args, kwargs = decode(json.loads(line))
            send({"value": encode(candidate(*args, **kwargs))})
        except BaseException as exc:  # noqa: BLE001 - reported to the checker, which fails the call
            send({"error": f"{type(exc).__name__}: {exc}"})


class CompletionFailed(BaseException):
    """The completion's process could not answer a call (a BaseException: no ``except Exception`` in a test hides it)."""


class NoMoreImports:
    """First on ``sys.meta_path`` once the completion runs: the checker loads no module after that point.

    A module already loaded is served from ``sys.modules`` without asking any
    finder; any other import fails, whatever the completion wrote and wherever.
    """

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> None:
        _ = path, target
        raise ImportError(f"humaneval check: module {name!r} was not loaded before the completion ran, "
                          "and the checker loads none after")


def confine_path() -> None:
    """``sys.path`` without the working folder, the script's folder or any relative entry (``-I`` does most)."""
    here = os.getcwd()
    sys.path[:] = [p for p in sys.path if p and os.path.isabs(p) and os.path.realpath(p) != here]


def preload(*sources: str) -> None:
    """Import every module that ``sources`` import anywhere (inside functions too), so nothing loads later."""
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            for name in names:
                try:
                    importlib.import_module(name)
                except Exception:  # noqa: BLE001 - not a module (a name from one), or missing: the test says so
                    pass


def readable_by_nobody(paths: list[str]) -> bool:
    """Whether every folder above and including each of ``paths`` lets any user through (o+x)."""
    for path in paths:
        path = os.path.realpath(path)
        if not os.path.exists(path):  # the standard library's zip, which most installations do not have
            continue
        while True:
            try:
                if not os.stat(path).st_mode & 0o001:
                    return False
            except OSError:
                return False
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
    return True


def private_folder(owner: int | None = None) -> str:
    """A fresh folder only its owner can enter (``owner``: a uid to hand it to, as root)."""
    folder = tempfile.mkdtemp(prefix="humaneval-check-")
    if owner is not None:
        os.chown(folder, owner, owner)
    return folder


def check(payload: str, source: str) -> None:
    """The checker: prints the token after the tests' ``check(candidate)`` returned, else fails."""
    settings = json.loads(payload)
    _prctl(4, 0)  # PR_SET_DUMPABLE 0: no /proc/<pid>/mem, fd or environ for other processes of the user
    confine_path()
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    as_nobody = root and readable_by_nobody([sys.executable, *sys.path])
    own_folder = private_folder()
    child_folder = private_folder(NOBODY if as_nobody else None)
    os.chdir(own_folder)
    child: Any = None
    requests: Any = None
    replies: Any = None

    def ask(message: Any) -> dict:
        try:
            requests.write(json.dumps(message) + "\n")
            requests.flush()
        except BrokenPipeError:
            pass
        line = replies.readline()
        if not line:
            raise CompletionFailed(f"the completion's process ended (exit status {child.wait()})")
        reply = json.loads(line)
        if "error" in reply:
            raise CompletionFailed(reply["error"])
        return reply

    def candidate(*args: Any, **kwargs: Any) -> Any:
        return decode(ask(encode([list(args), kwargs]))["value"])

    try:
        # the prompt and the tests, and all they import, are loaded before the completion exists
        namespace: dict[str, Any] = {"__name__": "humaneval_check"}
        for name in ("prompt", "test"):  # a traceback shows the failing line of the tests
            linecache.cache[f"<{name}>"] = (len(settings[name]), None, settings[name].splitlines(True), f"<{name}>")
        preload(settings["prompt"], settings["test"])
        exec(compile(settings["prompt"], "<prompt>", "exec", dont_inherit=True), namespace)
        namespace[settings["entry_point"]] = candidate  # a test may call the function by its name
        exec(compile(settings["test"], "<test>", "exec", dont_inherit=True), namespace)
        tests = namespace["check"]
        requests_r, requests_w = os.pipe()
        replies_r, replies_w = os.pipe()
        child = subprocess.Popen(
            [sys.executable, "-I", "-c", f"{source}\nserve({requests_r}, {replies_w}, {as_nobody})\n"],
            stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(), pass_fds=(requests_r, replies_w), cwd=child_folder,
        )
        sys.meta_path.insert(0, NoMoreImports)
        os.close(requests_r)
        os.close(replies_w)
        requests = os.fdopen(requests_w, "w", encoding="utf-8")
        replies = os.fdopen(replies_r, "r", encoding="utf-8")
        if ask([settings["program"], settings["entry_point"]]) != {"ready": True}:
            raise CompletionFailed("the completion's process did not start")
        tests(candidate)
    except BaseException:
        traceback.print_exc()  # with the failing line of the tests, from linecache
        raise SystemExit(1) from None
    finally:
        if child is not None:
            child.kill()
            child.wait()
        for folder in (own_folder, child_folder):
            try:
                shutil.rmtree(folder, ignore_errors=True)
            except Exception:  # noqa: BLE001 - a tree too deep to remove: the sandbox goes with the session
                pass
    sys.stdout.write(settings["token"] + "\n")
    sys.stdout.flush()
