"""Framework overhead per attempt: agentcompass against Inspect AI, measured in the same run.

Both evaluate N instant tasks with no real model: agentcompass runs the
``synthetic`` benchmark with the ``oracle`` harness through the real Snakemake
workflow; Inspect AI runs the same N samples with a model provider that answers
at once (registered through Inspect's ``inspect_ai`` entry point, since
``mockllm`` wants to download a tokenizer). Printed: wall and CPU seconds per
attempt for each, their ratio, the no-op rerun of each, a dry run of
``--dry-run-n`` attempts, and peak memory.

    python scripts/bench_overhead.py --n 1000
    python scripts/bench_overhead.py --n 10000 --dry-run-n 20000

Inspect AI is installed into its own virtual environment (``--inspect-venv``,
created on first use). This script is not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSPECT_VERSION = "0.3.285"

PROVIDER = '''
from inspect_ai.model import ModelAPI, ModelOutput, modelapi


@modelapi(name="instant")
def instant():
    from .api import InstantAPI

    return InstantAPI
'''

PROVIDER_API = '''
import re

from inspect_ai.model import ModelAPI, ModelOutput


class InstantAPI(ModelAPI):
    """Answers at once with the word the question asks for."""

    def __init__(self, model_name, base_url=None, api_key=None, config=None, **kwargs):
        super().__init__(model_name=model_name, base_url=base_url, api_key=api_key, config=config)

    async def generate(self, input, tools, tool_choice, config):
        text = input[-1].text if input else ""
        match = re.search(r"w\\d+", text)
        return ModelOutput.from_content(model=self.model_name, content=match.group(0) if match else "")
'''

TASK = '''
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import exact
from inspect_ai.solver import generate


@task
def synthetic(n: int = 100):
    width = len(str(n))
    samples = [Sample(id=f"t{i:0{width}d}", input=f"Repeat the word w{i}.", target=f"w{i}") for i in range(n)]
    return Task(dataset=samples, solver=generate(), scorer=exact())
'''


class TreeMemory:
    """Peak of the summed RSS of a process and all its descendants, sampled every 0.2 s.

    A sharded run is several Snakemake processes at once; getrusage and GNU
    time only know the largest single process.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self._stop.wait(0.2):
            total = 0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for proc in procs:
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    total += proc.memory_info().rss
            self.peak = max(self.peak, total)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def timed(cmd: list[str], cwd: Path, env: dict | None = None) -> dict:
    """Wall and CPU seconds (of the command and its children) and the peak RSS of its process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err)
        memory = TreeMemory(proc.pid)
        returncode = proc.wait()
        wall = time.perf_counter() - start
        peak = memory.stop()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if returncode != 0:
        sys.exit(f"command failed ({returncode}): {' '.join(cmd)}\n{stdout[-2000:]}\n{stderr[-4000:]}")
    return {
        "wall": wall,
        "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "peak_rss_mb": max(peak, 1) / 2**20,
        "stdout": stdout,
        "stderr": stderr,
    }


def ensure_inspect(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = subprocess.run([str(python), "-c", "import inspect_ai, inspect_instant"], capture_output=True)
    if probe.returncode != 0:
        pkg = venv / "inspect_instant_src"
        (pkg / "inspect_instant").mkdir(parents=True, exist_ok=True)
        (pkg / "inspect_instant" / "__init__.py").write_text("")
        (pkg / "inspect_instant" / "_registry.py").write_text(PROVIDER)
        (pkg / "inspect_instant" / "api.py").write_text(PROVIDER_API)
        (pkg / "pyproject.toml").write_text(textwrap.dedent("""
            [build-system]
            requires = ["setuptools>=68"]
            build-backend = "setuptools.build_meta"
            [project]
            name = "inspect-instant"
            version = "0.1.0"
            [project.entry-points.inspect_ai]
            inspect_instant = "inspect_instant._registry"
        """))
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"inspect-ai=={INSPECT_VERSION}", str(pkg)], check=True)
    return venv / "bin" / "inspect"


def agentcompass_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAKEMAKE")}
    env["AGENTCOMPASS_USER_CONFIG"] = ""
    return env


def snakemake_cmd(n: int, cores: int, shard_size: int | None, *extra: str) -> list[str]:
    request = {"bench": {"benchmark": {"id": "synthetic", "params": {"num_tasks": n}}, "harness": "oracle", "model": {"id": "none"}}}
    config = [f"requests={json.dumps(request)}"]
    if shard_size is not None:
        config.append(f"runtime={json.dumps({'shard_size': shard_size})}")
    # targets and flags first: --quiet and --config take every value after them
    return [sys.executable, "-m", "snakemake", *extra, "--snakefile", str(ROOT / "Snakefile"), "--cores", str(cores),
            "--quiet", "--config", *config]


def bench_agentcompass(n: int, cores: int, shard_size: int | None, work: Path) -> dict:
    work.mkdir(parents=True)
    env = agentcompass_env()
    full = timed(snakemake_cmd(n, cores, shard_size), work, env)
    metrics = json.loads((work / "results/default/bench/metrics.json").read_text())
    assert metrics["num_attempts"] == n and metrics["metrics"]["accuracy"] == 1.0, metrics
    noop = timed(snakemake_cmd(n, cores, shard_size), work, env)
    return {"full": full, "noop": noop}


def bench_dry_run(n: int, cores: int, shard_size: int | None, work: Path) -> dict:
    """A dry run over n attempts whose task list and plans exist (so the whole DAG is built)."""
    work.mkdir(parents=True)
    env = agentcompass_env()
    timed(snakemake_cmd(n, cores, shard_size, "results/default/bench/plans.json"), work, env)
    return timed(snakemake_cmd(n, cores, shard_size, "--dry-run"), work, env)


def bench_inspect(n: int, inspect: Path, work: Path, connections: int) -> dict:
    work.mkdir(parents=True)
    (work / "task.py").write_text(TASK)
    env = {**os.environ, "INSPECT_DISPLAY": "none", "INSPECT_LOG_LEVEL": "warning"}
    base = [str(inspect), "eval-set", "task.py", "-T", f"n={n}", "--model", "instant/fast",
            "--max-connections", str(connections), "--log-dir", "logs", "--display", "none"]
    full = timed(base, work, env)
    noop = timed(base, work, env)
    return {"full": full, "noop": noop}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000, help="attempts (= Inspect samples)")
    parser.add_argument("--cores", type=int, default=64, help="Snakemake --cores (attempts wait on I/O)")
    parser.add_argument("--connections", type=int, default=64, help="Inspect --max-connections")
    parser.add_argument("--shard-size", type=int, default=None,
                        help="runtime.shard_size for agentcompass (default: the config's; 0 never shards)")
    parser.add_argument("--dry-run-n", type=int, default=0, help="also time a dry run over this many attempts")
    parser.add_argument("--inspect-venv", type=Path, default=ROOT / ".bench" / "inspect-venv")
    parser.add_argument("--skip-inspect", action="store_true")
    parser.add_argument("--dry-run-only", action="store_true", help="only time the dry run of --dry-run-n attempts")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directories")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="agentcompass-bench-"))
    try:
        if args.dry_run_only:
            dry = bench_dry_run(args.dry_run_n, args.cores, args.shard_size, scratch / "dry-run")
            print(f"dry run over {args.dry_run_n} attempts: {dry['wall']:.1f} s wall, peak {dry['peak_rss_mb']:.0f} MB")
            return
        inspect = None if args.skip_inspect else ensure_inspect(args.inspect_venv)
        shard = "config default" if args.shard_size is None else args.shard_size
        print(f"n={args.n}  snakemake --cores {args.cores} (shard_size {shard})  inspect --max-connections {args.connections}")
        ours = bench_agentcompass(args.n, args.cores, args.shard_size, scratch / "agentcompass")
        rows = [("agentcompass", ours)]
        if inspect:
            rows.append(("inspect-ai", bench_inspect(args.n, inspect, scratch / "inspect", args.connections)))
        print(f"{'':14}{'wall s':>9}{'cpu s':>9}{'wall ms/att':>13}{'cpu ms/att':>12}{'no-op s':>9}{'peak MB':>9}")
        for name, r in rows:
            f = r["full"]
            print(f"{name:14}{f['wall']:9.1f}{f['cpu']:9.1f}{1000 * f['wall'] / args.n:13.1f}"
                  f"{1000 * f['cpu'] / args.n:12.1f}{r['noop']['wall']:9.1f}{f['peak_rss_mb']:9.0f}")
        if inspect:
            a, b = ours["full"], rows[1][1]["full"]
            print(f"ratio agentcompass / inspect-ai: wall {a['wall'] / b['wall']:.2f}, cpu {a['cpu'] / b['cpu']:.2f}, "
                  f"no-op rerun {ours['noop']['wall'] / rows[1][1]['noop']['wall']:.2f}")
        if args.dry_run_n:
            dry = bench_dry_run(args.dry_run_n, args.cores, args.shard_size, scratch / "dry-run")
            print(f"dry run over {args.dry_run_n} attempts: {dry['wall']:.1f} s wall, peak {dry['peak_rss_mb']:.0f} MB")
    finally:
        if args.keep:
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
