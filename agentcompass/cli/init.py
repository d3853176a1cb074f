"""``agentcompass init``: write a starter project that uses the installed workflow."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from agentcompass import PROJECT_ROOT
from agentcompass._util.jsonio import write_text_atomic
from agentcompass.runtime.models.orchestration import EXIT_USAGE

from .common import _print


# `agentcompass init`'s Snakefile: the installed workflow as a Snakemake module
MODULE_SNAKEFILE = """\
# The agentcompass workflow as a Snakemake module: `snakemake --cores 2` in this folder
# builds the requests of configs/config.yaml into results/, as `agentcompass run` does.
# Add rules of your own below; the module's rules keep their names. Declare no onstart,
# onsuccess or onerror here: they would replace the workflow's (its events, its stops).
from agentcompass import PROJECT_ROOT


module agentcompass:
    snakefile:
        str(PROJECT_ROOT / "Snakefile")
    config:
        config


use rule * from agentcompass
"""


def _init_files() -> dict[str, Path]:
    """What ``init`` writes (relative path -> the shipped file or folder it copies)."""
    return {"configs/config.yaml": PROJECT_ROOT / "configs" / "config.yaml", "profiles": PROJECT_ROOT / "profiles"}


def cmd_init(args) -> int:
    target = Path(args.directory)
    if target.exists() and not target.is_dir():
        _print(f"agentcompass init: {target} is a file. Fix: name a new or existing folder", file=sys.stderr)
        return EXIT_USAGE
    written = [*_init_files(), "Snakefile"]
    present = [name for name in written if (target / name).exists()]
    if present:
        _print(f"agentcompass init: {target} already holds {', '.join(present)}; nothing was written. "
              "Fix: choose another folder, or move these away", file=sys.stderr)
        return EXIT_USAGE
    for name, source in _init_files().items():
        dest = target / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, dest)
        else:
            shutil.copyfile(source, dest)
    write_text_atomic(target / "Snakefile", MODULE_SNAKEFILE)
    _print(f"wrote {', '.join(str(target / name) for name in written)}\n"
          f"next: cd {target} && agentcompass run   (or: snakemake --cores 2)")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "init", help="write a starter project: configs/config.yaml, profiles/ and a Snakefile using the workflow",
        description="Writes DIRECTORY/configs/config.yaml (the example request: 'agentcompass run' there builds "
        "it), DIRECTORY/profiles/ (Snakemake profiles to copy or pass with -- --profile) and DIRECTORY/Snakefile "
        "(the workflow as a Snakemake module, for 'snakemake' and rules of your own). Writes nothing when one "
        "of them exists.",
    )
    p.add_argument("directory", nargs="?", default=".", metavar="DIRECTORY", help="the project folder (default: .)")
    p.set_defaults(func=cmd_init)
