"""Run the real workflow in this process with a harness that reports what its run phase can see.

    python workspace_probe_workflow.py WORKDIR CONFIG

The harness (not an oracle) lists every path under its workspace and whether
Harbor's verifier and solution folders exist in its session, and answers with
that listing; it changes nothing, so a verifier gives it no reward.
"""

from __future__ import annotations

import sys

from agentcompass.runtime import HARNESSES, BaseHarness, RunResult

# Harbor's fixed folders, and the workspace folder that stands in for them on host_process
PROBED = ["/tests", "/solution", "/logs/verifier", ".harbor"]


@HARNESSES.register()
class WorkspaceProbe(BaseHarness):
    """Lists its workspace and probes for the verifier's and the reference's folders."""

    id = "test_workspace_probe"
    requires_model = False

    async def run(self, prepared, env, req, plan, context) -> RunResult:
        listing = await env.exec(["find", prepared.input.workspace])
        present = [path for path in PROBED if await env.exists(path)]
        return RunResult(
            task_id=prepared.task_id, attempt=context.attempt, answer=listing.stdout,
            metadata={"listing_ok": listing.ok, "present": present, "workdir": env.workdir},
        )


def main() -> int:
    from agentcompass import sdk

    workdir, config = sys.argv[1], sys.argv[2]
    return 0 if sdk.run_snakemake(sdk.snakemake_argv(None, [config], 2, workdir=workdir)) else 1


if __name__ == "__main__":
    sys.exit(main())
