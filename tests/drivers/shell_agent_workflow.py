"""Run the real workflow in this process with a harness that runs its instruction as a shell script.

    python shell_agent_workflow.py WORKDIR CONFIG

The harness (not an oracle) runs the task's prompt with ``sh -c`` in its
workspace and answers with the script's output: a task folder's
instruction.md is then the agent's whole behaviour, so a test can play an
agent that tries to fool the verifier.
"""

from __future__ import annotations

import sys

from agentcompass.runtime import HARNESSES, BaseHarness, RunResult


@HARNESSES.register()
class ShellAgent(BaseHarness):
    """Runs the prompt as a shell script in the workspace."""

    id = "test_shell_agent"
    requires_model = False

    async def run(self, prepared, env, req, plan, context) -> RunResult:
        ran = await env.exec(["sh", "-c", prepared.input.prompt], cwd=prepared.input.workspace)
        return RunResult(
            task_id=prepared.task_id, attempt=context.attempt, answer=ran.stdout,
            metadata={"exit_status": ran.returncode, "stderr": ran.stderr[-2000:]},
        )


def main() -> int:
    from agentcompass import sdk

    workdir, config = sys.argv[1], sys.argv[2]
    return 0 if sdk.run_snakemake(sdk.snakemake_argv(None, [config], 2, workdir=workdir)) else 1


if __name__ == "__main__":
    sys.exit(main())
