"""Framework overhead per attempt: agentcompass against Inspect AI, measured in the same run.

Both evaluate N instant tasks with no real model: agentcompass runs the
``synthetic`` benchmark with the ``oracle`` harness through the real Snakemake
workflow; Inspect AI runs the same N samples with a model provider that answers
at once (registered through Inspect's ``inspect_ai`` entry point, since
``mockllm`` wants to download a tokenizer). Printed: wall and CPU seconds, in
all and per attempt, for each, their ratio, the no-op rerun of each (wall, CPU),
and agentcompass's dry run of ``--dry-run-n`` attempts (default: ``--n``) whose
task list and plans exist; the peak memory of each of these commands, summed
over all its processes (a sharded run is many); last, the machine's load
average at the start and the end (other work moves the figures by a fifth).

    python scripts/bench_overhead.py --n 1000
    python scripts/bench_overhead.py --n 10000 --dry-run-n 20000
    python scripts/bench_overhead.py --n 100000 --skip-inspect

``--load N`` runs N CPU burners (a tight Python loop each, a process each)
beside every measured command of both sides, from just before it starts until
it has ended: how each copes with a machine that is busy with other work. Their
CPU is counted in neither side's figures.

    python scripts/bench_overhead.py --n 1000 --load 2

``--latency L`` makes the attempts wait on a model instead: a stand-in
OpenAI-compatible server of this script, on 127.0.0.1 in a process of its own,
answers every call after L seconds. agentcompass runs ``synthetic`` with the
``chat`` harness (one call an attempt), Inspect AI ``generate()`` through its
OpenAI provider, both against that server at the same number of slots; with
``--calls K`` each attempt makes K calls (agentcompass: ``tool_agent``, K-1
``read_file`` calls then ``submit``; Inspect: ``generate()`` looping over a
tool of its own). Printed besides: the ideal wall time N x K x L / slots, the
ratio to it, the most calls the server had in flight, the share of the run it
had 90% of the slots or more busy, and when (seconds after the start) the
first call came and the last answer went: the start-up and the tail.

    python scripts/bench_overhead.py --n 1000 --latency 1
    python scripts/bench_overhead.py --n 200 --latency 0.5 --calls 10
    python scripts/bench_overhead.py --n 1000 --latency 1 --endpoint-cap 16 --skip-inspect
    python scripts/bench_overhead.py --n 1000 --latency 1 --endpoint-cap 16 --shard-threads 8 --skip-inspect
    python scripts/bench_overhead.py --n 1000 --latency 1 --spend --skip-inspect

``--spend`` (with ``--latency``) runs agentcompass twice more under per-attempt
limits and budgets that never bind (every call checked against the limits and
charged to the request's and the run's ledger), alternating with plain runs,
and prints the ratio of their wall and CPU time to the plain runs'.

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


TOOL_TASK = '''
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import tool


@tool
def read_file():
    async def execute(path: str) -> str:
        """Read a text file.

        Args:
            path: Path of the file.
        """
        return f"no such file: {path}"

    return execute


@task
def synthetic_tools(n: int = 100):
    width = len(str(n))
    samples = [Sample(id=f"t{i:0{width}d}", input=f"Repeat the word w{i}.", target=f"w{i}") for i in range(n)]
    return Task(dataset=samples, solver=[use_tools(read_file()), generate()], scorer=includes())
'''

# The stand-in model: an asyncio HTTP/1.1 server (keep-alive, Content-Length bodies) that answers
# every chat completion after LATENCY seconds with the word the first user message asks for, after
# CALLS - 1 tool calls (read_file) when the request offers tools, then `submit` when that is offered.
# GET /stats gives the most requests in flight and the seconds spent at each count; POST /reset zeroes them.
SERVER = r'''
import asyncio, json, re, sys, time

LATENCY, CALLS, PORT_FILE = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
state = {"now": 0, "max": 0, "since": time.monotonic(), "at": {}, "calls": 0, "first": None, "last": None}


def move(delta):
    now = time.monotonic()
    state["at"][state["now"]] = state["at"].get(state["now"], 0.0) + now - state["since"]
    state["since"] = now
    state["now"] += delta
    state["max"] = max(state["max"], state["now"])


def reply(request):
    messages = request.get("messages", [])
    first = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
    match = re.search(r"w\d+", first if isinstance(first, str) else json.dumps(first))
    word = match.group(0) if match else ""
    tools = [t["function"]["name"] for t in request.get("tools") or []]
    done = sum(1 for m in messages if m.get("role") == "tool")
    message = {"role": "assistant", "content": word}
    call = None
    if tools and done < CALLS - 1:
        call = ("read_file" if "read_file" in tools else tools[0], {"path": f"notes{done}.txt"})
    elif "submit" in tools:
        call = ("submit", {"answer": word})
    if call:
        message = {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call{done}", "type": "function",
            "function": {"name": call[0], "arguments": json.dumps(call[1])}}]}
    return {"id": "r", "object": "chat.completion", "created": 0, "model": request.get("model", "m"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if call else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}


async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            length = 0
            for line in lines[1:]:
                if line.lower().startswith("content-length:"):
                    length = int(line.split(":", 1)[1])
            body = await reader.readexactly(length) if length else b""
            if path.endswith("/stats"):
                move(0)
                out = {"max_in_flight": state["max"], "seconds_at": state["at"], "calls": state["calls"],
                       "first": state["first"], "last": state["last"]}
            elif path.endswith("/reset"):
                state.update(now=0, max=0, since=time.monotonic(), at={}, calls=0, first=None, last=None)
                out = {}
            else:
                state["calls"] += 1
                if state["first"] is None:
                    state["first"] = time.monotonic()
                move(1)
                try:
                    await asyncio.sleep(LATENCY)
                    out = reply(json.loads(body))
                finally:
                    move(-1)
                    state["last"] = time.monotonic()
            data = json.dumps(out).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(data)).encode() + b"\r\n\r\n" + data)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    with open(PORT_FILE, "w") as f:
        f.write(str(server.sockets[0].getsockname()[1]))
    async with server:
        await server.serve_forever()


asyncio.run(main())
'''


class StandIn:
    """The stand-in model server, in a process of its own (its CPU is not counted)."""

    def __init__(self, latency: float, calls: int, work: Path) -> None:
        work.mkdir(parents=True, exist_ok=True)
        port_file = work / "port"
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, str(latency), str(calls), str(port_file)])
        for _ in range(200):
            if port_file.exists() and port_file.read_text():
                break
            time.sleep(0.05)
        else:
            self.proc.kill()
            sys.exit("the stand-in model server did not start")
        self.base_url = f"http://127.0.0.1:{port_file.read_text()}/v1"

    def _call(self, path: str, method: str = "GET") -> dict:
        import urllib.request

        req = urllib.request.Request(self.base_url + path, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=10) as reply:
            return json.loads(reply.read())

    def reset(self) -> None:
        self._call("/reset", "POST")

    def stats(self, slots: int, started: float) -> dict:
        """Most calls in flight, the share of the time from the first call to the last with at
        least 90% of ``slots`` in flight, and when the first call came and the last answer went
        (seconds after ``started``, a ``time.monotonic()``: the clock is the machine's)."""
        raw = self._call("/stats")
        at = {int(k): v for k, v in raw["seconds_at"].items()}
        busy = sum(at.values()) - at.get(0, 0.0)
        near = sum(v for k, v in at.items() if k >= 0.9 * slots)
        return {"max_in_flight": raw["max_in_flight"], "calls": raw["calls"], "share_full": near / busy if busy else 0.0,
                "first": raw["first"] - started if raw["first"] else float("nan"),
                "last": raw["last"] - started if raw["last"] else float("nan")}

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


BURNER = "while True:\n    pass\n"


@contextlib.contextmanager
def burners(count: int):
    """``count`` CPU burners running for the duration of the block; killed and reaped after it.

    ``timed`` measures inside the block: its CPU figure is the growth of this
    process's reaped children's, and the burners are reaped after it is taken.
    """
    procs = [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


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
    started = time.monotonic()
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
        "started": started,
        "stdout": stdout,
        "stderr": stderr,
    }


def ensure_inspect(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = subprocess.run([str(python), "-c", "import inspect_ai, inspect_instant, openai"], capture_output=True)
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
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"inspect-ai=={INSPECT_VERSION}", "openai", str(pkg)], check=True)
    return venv / "bin" / "inspect"


def agentcompass_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAKEMAKE")}
    env["AGENTCOMPASS_USER_CONFIG"] = ""
    return env


# what --spend adds to every attempt: limits it never reaches and a budget it never spends, at prices, so that
# every call is checked against the limits and charged to the request's ledger and the run's
SPEND_PRICING = {"input_per_million": 1.0, "output_per_million": 2.0}
SPEND_EXECUTION = {"limits": {"calls": 1000, "total_tokens": 10_000_000, "cost_usd": 100.0},
                   "budget": {"cost_usd": 1_000_000.0}}
SPEND_RUNTIME = {"budget": {"total_tokens": 10_000_000_000}}


def snakemake_cmd(n: int, cores: int, shard_size: int | None, *extra: str, model: dict | None = None,
                  calls: int = 1, spent: bool = False) -> list[str]:
    """The workflow on n synthetic attempts: the oracle harness, or with a ``model`` the chat
    harness (one call) or tool_agent (``calls`` > 1); ``spent``: under limits and budgets (SPEND_*)."""
    harness: dict | str = "oracle"
    if model is not None:
        harness = "chat" if calls == 1 else {"id": "tool_agent", "params": {"max_steps": calls + 1}}
    request = {"bench": {"benchmark": {"id": "synthetic", "params": {"num_tasks": n}}, "harness": harness,
                         "environment": "host_process", "model": model or {"id": "none"}}}
    runtime: dict = {} if shard_size is None else {"shard_size": shard_size}
    if spent:
        request["bench"].update(execution=SPEND_EXECUTION, model={**request["bench"]["model"], "pricing": SPEND_PRICING})
        runtime.update(SPEND_RUNTIME)
    config = [f"requests={json.dumps(request)}"]
    if runtime:
        config.append(f"runtime={json.dumps(runtime)}")
    # targets and flags first: --quiet and --config take every value after them
    return [sys.executable, "-m", "snakemake", *extra, "--snakefile", str(ROOT / "Snakefile"), "--cores", str(cores),
            "--quiet", "--config", *config]


def bench_agentcompass(n: int, cores: int, shard_size: int | None, work: Path, load: int) -> dict:
    work.mkdir(parents=True)
    env = agentcompass_env()
    with burners(load):
        full = timed(snakemake_cmd(n, cores, shard_size), work, env)
    metrics = json.loads((work / "results/default/bench/metrics.json").read_text())
    assert metrics["num_attempts"] == n and metrics["metrics"]["accuracy"] == 1.0, metrics
    with burners(load):
        noop = timed(snakemake_cmd(n, cores, shard_size), work, env)
    return {"full": full, "noop": noop}


def bench_latency(args, server: StandIn, inspect: Path | None, scratch: Path) -> None:
    """Latency-bound rows: agentcompass and Inspect AI against the stand-in, same slots."""
    n, calls, slots = args.n, args.calls, args.cores
    ideal = n * calls * args.latency / (min(slots, args.endpoint_cap) if args.endpoint_cap else slots)
    model = {"id": "stand-in", "base_url": server.base_url}
    extra: list[str] = []
    if args.endpoint_cap:
        from agentcompass.runtime.model_client import endpoint_resource

        extra = ["--resources", f"{endpoint_resource(server.base_url)}={args.endpoint_cap}"]
    if args.shard_threads:
        extra += ["--set-threads", f"shard={args.shard_threads}"]
    extra += args.snakemake_arg
    rows = []
    work = scratch / "agentcompass"
    work.mkdir(parents=True)
    server.reset()
    with burners(args.load):
        ours = timed(snakemake_cmd(n, slots, args.shard_size, *extra, model=model, calls=calls), work,
                     agentcompass_env())
    metrics = json.loads((work / "results/default/bench/metrics.json").read_text())
    assert metrics["num_attempts"] == n and metrics["metrics"]["accuracy"] == 1.0, metrics
    rows.append(("agentcompass", ours, server.stats(min(slots, args.endpoint_cap or slots), ours["started"])))
    if inspect:
        work = scratch / "inspect"
        work.mkdir(parents=True)
        (work / "task.py").write_text(TASK if calls == 1 else TOOL_TASK)
        env = {**os.environ, "INSPECT_DISPLAY": "none", "INSPECT_LOG_LEVEL": "warning", "OPENAI_API_KEY": "unused"}
        connections = min(args.connections, args.endpoint_cap) if args.endpoint_cap else args.connections
        server.reset()
        with burners(args.load):
            theirs = timed([str(inspect), "eval", "task.py", "-T", f"n={n}", "--model", "openai/stand-in",
                            "--model-base-url", server.base_url, "-M", "responses_api=false",
                            "--max-connections", str(connections), "--log-dir", "logs", "--display", "none"],
                           work, env)
        rows.append(("inspect-ai", theirs, server.stats(connections, theirs["started"])))
    if args.spend:  # the same run under limits and budgets, then each once more: ratios of like to like
        for spent in (True, False, True):
            work = scratch / f"agentcompass-{len(rows)}"
            work.mkdir(parents=True)
            server.reset()
            with burners(args.load):
                again = timed(snakemake_cmd(n, slots, args.shard_size, *extra, model=model, calls=calls, spent=spent),
                              work, agentcompass_env())
            if spent:
                ledger = json.loads((work / "results/default/bench/spend.json").read_text())
                assert ledger["calls"] == n * calls, ledger
            rows.append(("+ spend" if spent else "agentcompass", again,
                         server.stats(min(slots, args.endpoint_cap or slots), again["started"])))
    print(f"{'':14}{'wall s':>9}{'cpu s':>9}{'ideal s':>9}{'/ideal':>8}{'calls':>7}{'max in flight':>15}{'time >=90%':>12}"
          f"{'first call s':>14}{'last answer s':>15}")
    for name, r, st in rows:
        print(f"{name:14}{r['wall']:9.1f}{r['cpu']:9.1f}{ideal:9.1f}{r['wall'] / ideal:8.2f}{st['calls']:7d}"
              f"{st['max_in_flight']:15d}{100 * st['share_full']:11.0f}%{st['first']:14.1f}{st['last']:15.1f}")
    if inspect:
        print(f"ratio agentcompass / inspect-ai: wall {rows[0][1]['wall'] / rows[1][1]['wall']:.2f}, "
              f"cpu {rows[0][1]['cpu'] / rows[1][1]['cpu']:.2f}")
    if args.spend:
        plain = [r for name, r, _ in rows if name == "agentcompass"]
        spent_rows = [r for name, r, _ in rows if name == "+ spend"]
        wall = sum(r["wall"] for r in spent_rows) / sum(r["wall"] for r in plain)
        cpu = sum(r["cpu"] for r in spent_rows) / sum(r["cpu"] for r in plain)
        print(f"ratio with limits and budgets / without ({len(spent_rows)} runs each, alternating): "
              f"wall {wall:.3f}, cpu {cpu:.3f}")


def bench_dry_run(n: int, cores: int, shard_size: int | None, work: Path, load: int) -> dict:
    """A dry run over n attempts whose task list and plans exist (so the whole DAG is built)."""
    work.mkdir(parents=True)
    env = agentcompass_env()
    timed(snakemake_cmd(n, cores, shard_size, "results/default/bench/plans.json"), work, env)
    with burners(load):
        return timed(snakemake_cmd(n, cores, shard_size, "--dry-run"), work, env)


def dry_run_line(n: int, dry: dict) -> str:
    return (f"dry run over {n} attempts: {dry['wall']:.1f} s wall, {dry['cpu']:.1f} s cpu, "
            f"peak {dry['peak_rss_mb']:.0f} MB")


def bench_inspect(n: int, inspect: Path, work: Path, connections: int, load: int) -> dict:
    work.mkdir(parents=True)
    (work / "task.py").write_text(TASK)
    env = {**os.environ, "INSPECT_DISPLAY": "none", "INSPECT_LOG_LEVEL": "warning"}
    base = [str(inspect), "eval-set", "task.py", "-T", f"n={n}", "--model", "instant/fast",
            "--max-connections", str(connections), "--log-dir", "logs", "--display", "none"]
    with burners(load):
        full = timed(base, work, env)
    with burners(load):
        noop = timed(base, work, env)
    return {"full": full, "noop": noop}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000, help="attempts (= Inspect samples)")
    parser.add_argument("--cores", type=int, default=64, help="Snakemake --cores (attempts wait on I/O)")
    parser.add_argument("--connections", type=int, default=64, help="Inspect --max-connections")
    parser.add_argument("--shard-size", type=int, default=None,
                        help="runtime.shard_size for agentcompass (default: the config's; 0 never shards)")
    parser.add_argument("--dry-run-n", type=int, default=None,
                        help="attempts of agentcompass's dry run (default: --n; 0: no dry run)")
    parser.add_argument("--inspect-venv", type=Path, default=ROOT / ".bench" / "inspect-venv")
    parser.add_argument("--skip-inspect", action="store_true")
    parser.add_argument("--dry-run-only", action="store_true", help="only time the dry run of --dry-run-n attempts")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directories")
    parser.add_argument("--latency", type=float, default=0.0,
                        help="seconds the stand-in model takes per call: attempts that wait on a model (0: instant)")
    parser.add_argument("--calls", type=int, default=1, help="model calls per attempt with --latency (>1: tool_agent)")
    parser.add_argument("--endpoint-cap", type=int, default=0,
                        help="with --latency: cap the calls in flight at the endpoint (its model_endpoint_ resource)")
    parser.add_argument("--shard-threads", type=int, default=0,
                        help="with --latency: threads of each shard (--set-threads shard=N); with --endpoint-cap, "
                        "shards claiming half the cap each run two at once")
    parser.add_argument("--snakemake-arg", action="append", default=[],
                        help="with --latency: one more argument for agentcompass's Snakemake (repeat for more)")
    parser.add_argument("--spend", action="store_true",
                        help="with --latency: also run under per-attempt limits and budgets (a ledger charged at "
                        "every call), alternating with runs without, and print the ratio")
    parser.add_argument("--load", type=int, default=0,
                        help="CPU burners (a busy Python loop each) running beside every measured command")
    args = parser.parse_args()
    if args.calls < 1 or args.latency < 0 or args.endpoint_cap < 0 or args.load < 0:
        parser.error("--calls must be at least 1, --latency, --endpoint-cap and --load at least 0")
    if args.dry_run_n is None:
        args.dry_run_n = args.n
    load = f"  load: {args.load} CPU burner(s) beside each measured command" if args.load else ""

    scratch = Path(tempfile.mkdtemp(prefix="agentcompass-bench-"))
    load_before = os.getloadavg()[0]
    try:
        if args.latency:
            inspect = None if args.skip_inspect else ensure_inspect(args.inspect_venv)
            print(f"n={args.n}  latency {args.latency:g} s  {args.calls} call(s) per attempt  "
                  f"slots {args.cores} (snakemake --cores, inspect --max-connections)"
                  + (f"  endpoint cap {args.endpoint_cap}" if args.endpoint_cap else "") + load)
            server = StandIn(args.latency, args.calls, scratch / "server")
            try:
                bench_latency(args, server, inspect, scratch)
            finally:
                server.close()
            return
        if args.dry_run_only:
            if load:
                print(load.strip())
            dry = bench_dry_run(args.dry_run_n, args.cores, args.shard_size, scratch / "dry-run", args.load)
            print(dry_run_line(args.dry_run_n, dry))
            return
        inspect = None if args.skip_inspect else ensure_inspect(args.inspect_venv)
        shard = "config default" if args.shard_size is None else args.shard_size
        print(f"n={args.n}  snakemake --cores {args.cores} (shard_size {shard})  "
              f"inspect --max-connections {args.connections}" + load)
        ours = bench_agentcompass(args.n, args.cores, args.shard_size, scratch / "agentcompass", args.load)
        rows = [("agentcompass", ours)]
        if inspect:
            rows.append(("inspect-ai", bench_inspect(args.n, inspect, scratch / "inspect", args.connections,
                                                     args.load)))
        # peak MB: of the whole run, summed over its processes; the no-op's the same
        print(f"{'':14}{'wall s':>9}{'cpu s':>9}{'wall ms/att':>13}{'cpu ms/att':>12}{'no-op s':>9}{'peak MB':>9}"
              f"{'no-op cpu s':>13}{'no-op MB':>10}")
        for name, r in rows:
            f, noop = r["full"], r["noop"]
            print(f"{name:14}{f['wall']:9.1f}{f['cpu']:9.1f}{1000 * f['wall'] / args.n:13.1f}"
                  f"{1000 * f['cpu'] / args.n:12.1f}{noop['wall']:9.1f}{f['peak_rss_mb']:9.0f}"
                  f"{noop['cpu']:13.1f}{noop['peak_rss_mb']:10.0f}")
        if inspect:
            a, b = ours["full"], rows[1][1]["full"]
            print(f"ratio agentcompass / inspect-ai: wall {a['wall'] / b['wall']:.2f}, cpu {a['cpu'] / b['cpu']:.2f}, "
                  f"no-op rerun {ours['noop']['wall'] / rows[1][1]['noop']['wall']:.2f}")
        if args.dry_run_n:
            dry = bench_dry_run(args.dry_run_n, args.cores, args.shard_size, scratch / "dry-run", args.load)
            print(dry_run_line(args.dry_run_n, dry))
    finally:
        # other work on the machine moves these figures by a fifth: compare runs under like loads
        print(f"load average {load_before:.2f} at the start, {os.getloadavg()[0]:.2f} at the end "
              f"({os.cpu_count()} CPUs)")
        if args.keep:
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
