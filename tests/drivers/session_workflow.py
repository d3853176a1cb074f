"""Run the real workflow in this process with a harness that says when its session opened.

    python session_workflow.py WORKDIR CONFIG [CORES]

``test_session_clock`` opens its run-phase session (a command in it), records
the time it opened, then holds the session for ``hold`` seconds before it
answers. ``test_open_clock`` is host_process that notes when it began to open
each session (its turn under ``runtime.environment_open_rate``), which the
clock records instead: setting up a sandbox takes longer on a loaded machine.
``test_slow_close`` is host_process whose sessions take ``close_seconds`` to
close, like a container that is slow to stop.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass

from agentcompass.environments.host_process import HostProcessConfig, HostProcessEnvironment
from agentcompass.runtime import ENVIRONMENTS, HARNESSES, BaseHarness, RunResult
from agentcompass.runtime.config import ComponentConfig, config_field


@dataclass(slots=True)
class ClockConfig(ComponentConfig):
    hold: float = config_field(default=0.0, description="Seconds to keep the session after opening it.")


@HARNESSES.register()
class SessionClock(BaseHarness):
    """Answers the reference after holding its session; records when the session opened."""

    id = "test_session_clock"
    config_class = ClockConfig
    is_oracle = True
    requires_model = False

    async def run(self, prepared, env, req, plan, context) -> RunResult:
        await env.exec(["true"])  # opens the session
        opened = getattr(env, "open_began", None) or time.time()
        await asyncio.sleep(plan.params["hold"])
        return RunResult(task_id=prepared.task_id, attempt=context.attempt, answer=context.reference,
                         metadata={"opened": opened})


@ENVIRONMENTS.register()
class OpenClock(HostProcessEnvironment):
    """host_process that notes on each session when its opening began."""

    id = "test_open_clock"
    config_class = HostProcessConfig

    async def open(self, spec, network, label):
        began = time.time()  # right after the session's turn to open
        session = await super().open(spec, network, label)
        session.open_began = began
        return session


@dataclass(slots=True)
class SlowCloseConfig(HostProcessConfig):
    close_seconds: float = config_field(default=120.0, description="Seconds a session takes to close.")


@ENVIRONMENTS.register()
class SlowClose(HostProcessEnvironment):
    """host_process whose sessions are slow to close."""

    id = "test_slow_close"
    config_class = SlowCloseConfig

    async def open(self, spec, network, label):
        session = await super().open(spec, network, label)
        close, seconds = session.close, float(spec.params.get("close_seconds", 120.0))

        async def slow_close(**kwargs) -> None:
            await asyncio.sleep(seconds)
            await close(**kwargs)

        session.close = slow_close
        return session


def main() -> int:
    from agentcompass import sdk

    workdir, config = sys.argv[1], sys.argv[2]
    cores = sys.argv[3] if len(sys.argv) > 3 else "4"
    return 0 if sdk.run_snakemake(sdk.snakemake_argv(None, [config], cores, workdir=workdir)) else 1


if __name__ == "__main__":
    sys.exit(main())
