"""The working folder is never on the import path of a Python process a run starts.

``python -m snakemake`` (how Snakemake starts each job, and how a shard starts
its inner run) puts the folder it starts in first on ``sys.path``, and
Snakemake appends ``.snakemake/pip-deployments``, a path relative to it: a
``yaml.py`` or ``agentcompass.py`` in the run's working folder would be
imported in place of the real one, and a ``ujson.py`` under
``.snakemake/pip-deployments`` wherever an optional import looks for one.

- ``PYTHONSAFEPATH=1`` (Python's ``-P``), set in the environment every process
  of the run inherits (``safe_import_path``), keeps the folder off the path of
  the processes started after it; this process's relative entries are dropped.
- Snakemake's relative folder finds nothing in a process that imports
  agentcompass before Snakemake (the ``agentcompass`` command, the SDK): a path
  hook answers for it with a finder of nothing (``pip_deployments_inert``).
- A job imports Snakemake before anything of agentcompass, so a run whose
  folders hold something under ``.snakemake/pip-deployments`` is refused
  before any job starts (``planted``): agentcompass uses no pip deployments.

A process that goes on after its run (``agentcompass.sdk``) gets its
``PYTHONSAFEPATH`` and ``sys.path`` back as they were (``kept``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

# Python's -P as an environment variable: inherited by every Python process started after it is set
SAFE_PATH_ENV = "PYTHONSAFEPATH"
# the folder, relative to the working folder, that Snakemake appends to sys.path when it is imported
PIP_DEPLOYMENTS = ".snakemake/pip-deployments"


class _FindsNothing:
    """The finder of an import folder that holds nothing to import."""

    def find_spec(self, fullname: str, target: object = None) -> None:
        return None

    def invalidate_caches(self) -> None:
        pass


def _pip_deployments_hook(entry: str) -> _FindsNothing:
    if entry.rstrip("/") == PIP_DEPLOYMENTS:
        return _FindsNothing()
    raise ImportError("not Snakemake's pip deployments")  # the next hook decides


def pip_deployments_inert() -> None:
    """Snakemake's relative import folder finds nothing in this process, whatever a working folder holds
    there (a path hook: it outlives ``importlib.invalidate_caches``)."""
    if _pip_deployments_hook not in sys.path_hooks:
        sys.path_hooks.insert(0, _pip_deployments_hook)
        sys.path_importer_cache.pop(PIP_DEPLOYMENTS, None)


def planted(*folders: str | os.PathLike) -> list[str]:
    """What the ``.snakemake/pip-deployments`` of each of ``folders`` holds, by path (empty: nothing)."""
    found = []
    for folder in dict.fromkeys(os.path.abspath(f) for f in folders):
        where = os.path.join(folder, PIP_DEPLOYMENTS)
        try:
            found += [os.path.join(where, name) for name in sorted(os.listdir(where))]
        except OSError:  # no such folder (or no folder at all): nothing planted there
            continue
    return found


def safe_import_path() -> None:
    """Every Python process started from now on puts neither its working folder nor its script's folder on
    its import path; this process's path keeps absolute folders only."""
    os.environ[SAFE_PATH_ENV] = "1"
    sys.path[:] = [entry for entry in sys.path if entry and os.path.isabs(entry)]


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """Around a run in a process that goes on after it (the SDK, the CLI): ``PYTHONSAFEPATH`` and
    ``sys.path`` as they were before the run, so the caller's later programs find their own folders."""
    env, path = os.environ.get(SAFE_PATH_ENV), list(sys.path)
    try:
        yield
    finally:
        if env is None:
            os.environ.pop(SAFE_PATH_ENV, None)
        else:
            os.environ[SAFE_PATH_ENV] = env
        sys.path[:] = path
