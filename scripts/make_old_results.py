"""Build a small results folder with one checkout's code and pack it as a regression fixture.

tests/test_old_results_reused.py runs the current code's dry run over the
packed folder and expects no job: results that an earlier agentcompass built
are reused by this one. Make the fixture with the code of the commit it stands
for, checked out beside this one:

    git worktree add /tmp/agentcompass-old ae18995
    python scripts/make_old_results.py --code /tmp/agentcompass-old \\
        --out tests/data/old_results/ae18995.tar.gz

The run happens in WORKDIR (default /tmp/agentcompass-old-results, removed
first) with the config at WORKDIR/configs/config.yaml, found from the working
directory as a project config, and no user config. The request records the
absolute path of that file (request.json's params), so the test writes its
own folder in place of WORKDIR in Snakemake's records before the dry run.

Four requests: the oracle on 3 tasks with 2 attempts; the oracle on 5 tasks
with 2 attempts, which runtime.shard_size 6 builds as 2 shard jobs; the
chat harness on 2 tasks against a stand-in model server on 127.0.0.1 at a
fixed port (only while the fixture is made: a dry run calls no model); and
the oracle on 4 tasks with 2 attempts and execution.preflight, each task's
preflight built first and the 8 attempts in 2 shard jobs (``--no-preflight``
leaves it out, for code that had no preflight).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentcompass.testing.endpoint import ScriptedEndpoint, completion  # noqa: E402

WORKDIR = "/tmp/agentcompass-old-results"
PORT = 18437

CONFIG = f"""\
# The requests of the old-results fixture (scripts/make_old_results.py).
requests:
  oracle-plain:
    benchmark: {{id: example_exact_match, params: {{limit: 3}}}}
    harness: oracle
    environment: host_process
    model: {{id: none}}
    execution: {{attempts: 2}}
  oracle-sharded:
    benchmark: {{id: example_exact_match, params: {{limit: 5}}}}
    harness: oracle
    environment: host_process
    model: {{id: none}}
    execution: {{attempts: 2}}
  chat-loopback:
    benchmark: {{id: example_exact_match, params: {{limit: 2}}}}
    harness: chat
    environment: host_process
    model: {{id: scripted, base_url: "http://127.0.0.1:{PORT}/v1"}}
runtime: {{shard_size: 6, progress: false}}
"""
# the fourth request (the fixtures from 7bc5c65 on): each task's preflight, then 8 attempts in 2 shard jobs
PREFLIGHT_SHARDED = """\
  oracle-preflight-sharded:
    benchmark: {id: example_exact_match, params: {limit: 4}}
    harness: oracle
    environment: host_process
    model: {id: none}
    execution: {attempts: 2, preflight: oracle}
"""


def config(preflight: bool) -> str:
    """The fixture's config: three requests, and with ``preflight`` a fourth one with preflight and shards."""
    if not preflight:
        return CONFIG
    head, _, runtime = CONFIG.rpartition("runtime:")
    return head + PREFLIGHT_SHARDED + "runtime:" + runtime


def env_for(code: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAKEMAKE")}
    env["AGENTCOMPASS_USER_CONFIG"] = ""
    env["PYTHONPATH"] = str(code)
    return env


def snakemake(code: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(code / "Snakefile"),
           "--directory", str(workdir), "--cores", "2", *args]
    return subprocess.run(cmd, cwd=workdir, env=env_for(code), capture_output=True, text=True, timeout=600)


def packed(workdir: Path) -> list[Path]:
    """What the fixture holds: the config, results/ (not the run locks) and Snakemake's per-file records."""
    # .snakemake/incomplete/ (empty): without it Snakemake takes metadata/ for its old format and migrates it
    files = [workdir / "configs" / "config.yaml", workdir / ".snakemake" / "incomplete"]
    for top in ("results", ".snakemake/metadata"):
        files += sorted(p for p in (workdir / top).rglob("*") if p.is_file() and p.name != ".lock")
    return files


def pack(workdir: Path, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(out, "w:gz", format=tarfile.PAX_FORMAT) as tar:  # PAX: sub-second mtimes
        for path in packed(workdir):
            rel = path.relative_to(workdir)
            # the folders first, with their own times: a shard compares its attempt folders' times
            for parent in reversed(rel.parents[:-1]):
                if str(parent) not in tar.getnames():
                    tar.add(workdir / parent, arcname=str(parent), recursive=False, filter=clean)
            tar.add(path, arcname=str(rel), recursive=False, filter=clean)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose Snakefile and package run")
    parser.add_argument("--workdir", type=Path, default=Path(WORKDIR))
    parser.add_argument("--out", type=Path, required=True, help="the .tar.gz to write")
    parser.add_argument("--no-preflight", dest="preflight", action="store_false",
                        help="leave out the request with preflight and shards (the code of ae18995 had no preflight)")
    args = parser.parse_args()
    code, workdir = args.code.resolve(), args.workdir
    shutil.rmtree(workdir, ignore_errors=True)
    (workdir / "configs").mkdir(parents=True)
    (workdir / "configs" / "config.yaml").write_text(config(args.preflight))
    with ScriptedEndpoint(reply=lambda body: completion("Paris"), port=PORT) as endpoint:
        done = snakemake(code, workdir)
    print(done.stdout + done.stderr, file=sys.stderr if done.returncode else sys.stdout)
    if done.returncode:
        return done.returncode
    print(f"the model server answered {len(endpoint.requests)} requests")
    again = snakemake(code, workdir, "-n")
    if again.returncode or "Nothing to be done" not in again.stdout + again.stderr:
        print(again.stdout + again.stderr, file=sys.stderr)
        print("make_old_results: a dry run right after the build would still run jobs", file=sys.stderr)
        return 1
    pack(workdir, args.out)
    print(f"{args.out}: {args.out.stat().st_size} bytes, {len(packed(workdir))} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
