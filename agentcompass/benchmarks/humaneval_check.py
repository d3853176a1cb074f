"""The program that checks one HumanEval completion, sent on stdin to ``python3 -`` in the evaluation environment.

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

So ending the interpreter (exit, sys.exit, os._exit, SystemExit), patching
builtins, print or sys.stdout, redefining ``check``, or printing a line that
looks like a token only changes the child; none reaches the checker's stdout
with the token. Only the last line of stdout equal to the token, with exit
status 0, is a pass.
"""

from __future__ import annotations

import errno
import json
import linecache
import os
import subprocess
import sys
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


def _prctl(option: int, value: int) -> None:
    """prctl(2) where there is one (Linux); elsewhere nothing."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _drop_privileges() -> None:
    """Give up every Linux capability for good (CAP_SYS_PTRACE lets root read any process's memory)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        for cap in range(64):
            if libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:  # PR_CAPBSET_DROP
                break
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
        libc.capset(header, (ctypes.c_uint32 * 6)())  # effective, permitted, inheritable: none
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: no exec gains any back
    except (ImportError, OSError, AttributeError):
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


def serve(requests_fd: int, replies_fd: int) -> None:
    """The child: exec the program, then answer each call of the entry point with its encoded result."""
    _drop_privileges()
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


def check(payload: str, source: str) -> None:
    """The checker: prints the token after the tests' ``check(candidate)`` returned, else fails."""
    settings = json.loads(payload)
    _prctl(4, 0)  # PR_SET_DUMPABLE 0: no /proc/<pid>/mem, fd or environ for other processes of the user
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-c", f"{source}\nserve({requests_r}, {replies_w})\n"],
        stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(), pass_fds=(requests_r, replies_w),
    )
    os.close(requests_r)
    os.close(replies_w)
    requests = os.fdopen(requests_w, "w", encoding="utf-8")
    replies = os.fdopen(replies_r, "r", encoding="utf-8")

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
        if ask([settings["program"], settings["entry_point"]]) != {"ready": True}:
            raise CompletionFailed("the completion's process did not start")
        namespace: dict[str, Any] = {"__name__": "humaneval_check"}
        for name in ("prompt", "test"):  # a traceback shows the failing line of the tests
            linecache.cache[f"<{name}>"] = (len(settings[name]), None, settings[name].splitlines(True), f"<{name}>")
        exec(compile(settings["prompt"], "<prompt>", "exec", dont_inherit=True), namespace)
        namespace[settings["entry_point"]] = candidate  # a test may call the function by its name
        exec(compile(settings["test"], "<test>", "exec", dont_inherit=True), namespace)
        namespace["check"](candidate)
    except BaseException:
        traceback.print_exc()  # with the failing line of the tests, from linecache
        raise SystemExit(1) from None
    finally:
        child.kill()
        child.wait()
    sys.stdout.write(settings["token"] + "\n")
    sys.stdout.flush()
