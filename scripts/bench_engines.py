"""What a session and a command cost on each container engine, measured in one run.

    python scripts/bench_engines.py docker=unix:///tmp/dk/docker.sock \\
        podman-root=unix:///tmp/pmr/podman.sock podman-rootless=unix:///tmp/pml/home/podman.sock

Each engine (NAME=DOCKER_HOST) runs the docker environment with the same image
(``--image``, default local/busybox:latest; it must be on every engine): per
session, the median time to open a session and close it again (a container
created, started and removed); per command, the median time of ``exec(["true"])``
in one open session. The table gives each figure and its ratio to the first
engine named.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentcompass.environments import DockerEnvironment  # noqa: E402
from agentcompass.runtime.models import EnvironmentSpec, NetworkPolicy  # noqa: E402


async def measure(image: str, sessions: int, execs: int) -> tuple[float, float]:
    """(median seconds per session opened and closed, median seconds per exec) on the engine at DOCKER_HOST."""
    environment = DockerEnvironment()
    spec = EnvironmentSpec(id="docker", params={"image": image})
    policy = NetworkPolicy(mode="public")
    per_session = []
    for i in range(sessions):
        started = time.perf_counter()
        session = await environment.open(spec, policy, f"bench-{os.getpid()}-{i}")
        await session.close()
        per_session.append(time.perf_counter() - started)
    session = await environment.open(spec, policy, f"bench-{os.getpid()}-exec")
    try:
        await session.exec(["true"])  # the first command of a container may pay for setting it up
        per_exec = []
        for _ in range(execs):
            started = time.perf_counter()
            result = await session.exec(["true"])
            per_exec.append(time.perf_counter() - started)
            if not result.ok:
                raise SystemExit(f"exec(['true']) failed: {result}")
    finally:
        await session.close()
    return statistics.median(per_session), statistics.median(per_exec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("engines", nargs="+", metavar="NAME=DOCKER_HOST", help="an engine to measure, e.g. docker=unix:///tmp/dk/docker.sock")
    parser.add_argument("--image", default="local/busybox:latest", help="the image each session runs (on every engine)")
    parser.add_argument("--sessions", type=int, default=10, help="sessions opened and closed per engine")
    parser.add_argument("--execs", type=int, default=50, help="commands run per engine")
    args = parser.parse_args()
    engines = []
    for item in args.engines:
        name, sep, host = item.partition("=")
        if not sep or not name or not host:
            parser.error(f"an engine is NAME=DOCKER_HOST (e.g. docker=unix:///tmp/dk/docker.sock), got {item!r}")
        engines.append((name, host))
    rows = []
    for name, host in engines:
        os.environ["DOCKER_HOST"] = host
        session, exec_ = asyncio.run(measure(args.image, args.sessions, args.execs))
        rows.append((name, session, exec_))
        print(f"{name}: session {session * 1000:.0f} ms, exec {exec_ * 1000:.1f} ms", file=sys.stderr)
    base_session, base_exec = rows[0][1], rows[0][2]
    print(f"{'engine':<18} {'per session (ms)':>17} {'ratio':>6} {'per exec (ms)':>14} {'ratio':>6}")
    for name, session, exec_ in rows:
        print(f"{name:<18} {session * 1000:>17.0f} {session / base_session:>6.2f} {exec_ * 1000:>14.1f} {exec_ / base_exec:>6.2f}")
    print(f"(medians of {args.sessions} sessions and {args.execs} commands; ratios to {rows[0][0]})")


if __name__ == "__main__":
    main()
