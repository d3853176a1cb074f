"""Run the real workflow in this process with a harness that applies a patch its params give for the task.

    python patch_agent_workflow.py WORKDIR CONFIG

The harness ``test_patch_agent`` (not an oracle, no model) writes
``params.patches[task_id]`` into its session and applies it with ``git apply``
in the working directory (an empty patch changes nothing), then runs ``params.scripts[task_id]``: a test plays an
agent whose answer is exactly that diff.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from agentcompass.runtime import HARNESSES, BaseHarness, RunResult
from agentcompass.runtime.config import ComponentConfig, config_field


@dataclass(slots=True)
class PatchAgentConfig(ComponentConfig):
    patches: dict = config_field(default={}, description="The patch to apply, by task id.")
    scripts: dict = config_field(default={}, description="A shell script to run after it, by task id.")


@HARNESSES.register()
class PatchAgent(BaseHarness):
    """Applies the patch its params give for the task."""

    id = "test_patch_agent"
    config_class = PatchAgentConfig
    requires_model = False

    async def run(self, prepared, env, req, plan, context) -> RunResult:
        patch = plan.params["patches"].get(prepared.task_id, "")
        status = None
        if patch:
            await env.write_text("/tmp/agent.patch", patch)
            ran = await env.exec(["git", "apply", "/tmp/agent.patch"])
            await env.exec(["rm", "-f", "/tmp/agent.patch"])
            status = ran.returncode
        script = plan.params["scripts"].get(prepared.task_id)
        if script:
            await env.exec(["sh", "-c", script])
        return RunResult(task_id=prepared.task_id, attempt=context.attempt, answer="done",
                         metadata={"apply_status": status})


def main() -> int:
    from agentcompass import sdk

    workdir, config = sys.argv[1], sys.argv[2]
    return 0 if sdk.run_snakemake(sdk.snakemake_argv(None, [config], 2, workdir=workdir)) else 1


if __name__ == "__main__":
    sys.exit(main())
