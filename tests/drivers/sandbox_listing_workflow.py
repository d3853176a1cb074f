"""Run the real workflow in this process with a harness that reports what its sandbox holds.

    python sandbox_listing_workflow.py WORKDIR CONFIG

The harness (not an oracle) answers with the path of its run-phase working
directory followed by every file under it, name and content, so a test can
check what an agent could read there.
"""

from __future__ import annotations

import sys

from agentcompass.runtime import HARNESSES, BaseHarness, RunResult

LIST_FILES = 'pwd; find . -type f | sort | while read -r f; do echo "== $f"; cat "$f"; done'


@HARNESSES.register()
class SandboxListing(BaseHarness):
    """Answers with everything in its run-phase working directory."""

    id = "test_sandbox_listing"
    requires_model = False

    async def run(self, prepared, env, req, plan, context) -> RunResult:
        listing = await env.exec(LIST_FILES, shell=True)
        if not listing.ok:
            raise RuntimeError(f"could not list the sandbox: {listing.stderr}")
        return RunResult(task_id=prepared.task_id, attempt=context.attempt, answer=listing.stdout)


def main() -> int:
    from agentcompass import sdk

    workdir, config = sys.argv[1], sys.argv[2]
    return 0 if sdk.run_snakemake(sdk.snakemake_argv(None, [config], 2, workdir=workdir)) else 1


if __name__ == "__main__":
    sys.exit(main())
