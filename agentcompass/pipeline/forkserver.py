"""Inner runs forked from a process that has imported Snakemake already.

``python -m snakemake`` spends about 2.5 s of CPU on imports before it reads
the Snakefile: Snakemake and the plug-ins it collects (the SLURM executor
plug-in imports pandas), smart_open (and botocore) to open the Snakefile,
agentcompass's components. A run of 10,000 attempts starts 20 inner runs, and
the two that start at once share the two cores of a small machine with the
run that starts them.

A local run therefore starts its inner runs from a fork server (the standard
library's ``multiprocessing`` "forkserver"): one process, started as soon as
the run knows it will shard (``start``), imports all that once
(``agentcompass.pipeline.preload``), and each inner run is a fork of it that
calls Snakemake's command line in-process (``spawn``). A cluster job starts
its one inner run as a plain subprocess: it would pay for the imports either way.

An inner run forked this way is the child of the fork server, which exits
when the run that started it does; the inner run's parent watch (``lifecycle``)
follows the fork server, so it stops with the run as before.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import subprocess
import sys
import threading
import types
from pathlib import Path

from . import lifecycle

PRELOAD = "agentcompass.pipeline.preload"

_lock = threading.Lock()
_main_lock = threading.Lock()
_context: multiprocessing.context.ForkServerContext | None = None


def _ctx() -> multiprocessing.context.ForkServerContext:
    global _context
    with _lock:
        if _context is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload([PRELOAD])
            _context = ctx
        return _context


def start() -> None:
    """Start the fork server now, if it is not running: it imports in a process of its own
    while this run goes on (the first ``spawn`` waits for it)."""
    from multiprocessing import forkserver

    _ctx()
    forkserver.ensure_running()


def stop() -> None:
    """Stop the fork server this process started, and wait for it: its CPU, and its inner runs',
    count as this process's children's, as a subprocess's do (``getrusage``, ``time``)."""
    if _context is None:
        return
    from multiprocessing import forkserver

    # the standard library's own way to stop its server (its tests use it): close the pipe
    # whose end tells it that its clients are gone, then wait for it
    try:
        forkserver._forkserver._stop()  # type: ignore[attr-defined]
    except (OSError, ChildProcessError):
        pass


class InnerRun:
    """A forked inner run, with the part of ``subprocess.Popen`` that its callers use.

    The fork server tells a child's exit status once, as a message on a pipe:
    a second reader finds nothing, which ``multiprocessing`` reports as 255 (a
    shard that had succeeded, failed). Shards start and end in threads of the
    run, and a stop polls them from another; so one lock guards the read, and
    the child is not left in ``multiprocessing``'s list of children, which
    every ``Process.start()`` polls from the thread that starts one.
    """

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self._process = process
        self._lock = threading.Lock()
        self.pid = process.pid
        multiprocessing.process._children.discard(process)  # type: ignore[attr-defined]

    def poll(self) -> int | None:
        with self._lock:
            return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        multiprocessing.connection.wait([self._process.sentinel], timeout)
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired("inner snakemake", timeout or 0)
        return code

    def terminate(self) -> None:
        with self._lock:
            self._process.terminate()

    def kill(self) -> None:
        with self._lock:
            self._process.kill()


def spawn(argv: list[str], env: dict[str, str], log: Path) -> InnerRun:
    """Start ``python -m snakemake <argv>`` as a fork of the fork server: in this process's
    folder, with exactly ``env`` as its environment and its output in ``log``."""
    process = _ctx().Process(target=_child, args=(list(argv), dict(env), str(log), os.getcwd()),
                             name="agentcompass-inner-run")
    with _main_module_hidden():
        process.start()
    return InnerRun(process)


@contextlib.contextmanager
def _main_module_hidden():
    """``multiprocessing`` tells a child the parent's main module, for the child to run again
    (as ``__mp_main__``, so that it finds the functions defined there). An inner run needs
    nothing from it, and a caller's own script that drives a run without an
    ``if __name__ == "__main__":`` guard would run again in every shard; while a child
    starts, the main module is a blank one."""
    with _main_lock:
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = main


def _child(argv: list[str], env: dict[str, str], log: str, cwd: str) -> None:
    """The inner run, in the forked child: what ``python -m snakemake`` would do."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    # this process's parent is the fork server, which lives as long as the run that started it
    os.environ[lifecycle.PARENT_ENV] = str(os.getppid())
    # stdin: nothing, as a subprocess's (the fork server kept the run's, a terminal maybe,
    # which the inner run's sandboxes would inherit); stdout and stderr: the shard's log
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.argv = ["snakemake", *argv]
    from snakemake.cli import main

    try:
        main(argv)
    finally:
        _finish_like_an_interpreter()


def _finish_like_an_interpreter() -> None:
    """What an interpreter does at exit and a forked child skips (it ends with ``os._exit``):
    wait for the threads that are not daemons, run the ``atexit`` functions (logging's flush
    of Snakemake's log file among them), flush the console streams."""
    import atexit

    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
