"""Run the real workflow in this process, as ``agentcompass run`` does, with a harness that uses its sandbox.

    python workflow_driver.py WORKDIR CONFIG [hold]

The built-in harnesses never touch their environment, so this one does: it
leaves a background process in the session, reads the session's routing table
and answers with the reference only when that table is empty (the run phase
is isolated). With ``hold`` it then waits, so a test can kill this process
while the session is open, as ``kill -9`` of Snakemake would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys

from agentcompass.runtime import HARNESSES, BaseHarness, RunResult

HOLD = len(sys.argv) > 3 and sys.argv[3] == "hold"


@HARNESSES.register()
class SandboxProbe(BaseHarness):
    """Answers with the reference when the run phase has no route out."""

    id = "test_sandbox_probe"
    is_oracle = True
    requires_model = False

    async def run(self, prepared, env, req, plan, context) -> RunResult:
        await env.exec("sleep 300 >/dev/null 2>&1 &", shell=True)
        routes = await env.exec(["cat", "/proc/net/route"])
        isolated = routes.ok and routes.stdout.splitlines()[1:] == []
        if HOLD:
            print("holding", flush=True)
            await asyncio.sleep(600)
        result = RunResult(task_id=prepared.task_id, attempt=context.attempt)
        return dataclasses.replace(result, answer=context.reference if isolated else "the run phase had a route out")


def main() -> int:
    from snakemake.cli import args_to_api, parse_args

    workdir, config = sys.argv[1], sys.argv[2]
    from agentcompass import PROJECT_ROOT

    parser, args = parse_args(
        ["--snakefile", str(PROJECT_ROOT / "Snakefile"), "--directory", workdir, "--cores", "2", "--configfile", config]
    )
    return 0 if args_to_api(args, parser) else 1


if __name__ == "__main__":
    sys.exit(main())
