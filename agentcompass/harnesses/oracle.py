"""``oracle``: submits the Benchmark's reference answer, or runs its reference script. Needs no model."""

from __future__ import annotations

from agentcompass.runtime import HARNESSES, BaseHarness, FailureClass, RunResult, TaskStatus
from agentcompass.runtime.base import ScriptReference

# what the reference script printed, beside output.json (Harbor keeps it as agent/oracle.txt)
LOG_NAME = "oracle.txt"
_TAIL = 2000


@HARNESSES.register()
class OracleHarness(BaseHarness):
    """Submits the Benchmark's reference solution: a check that scoring works end to end.

    A reference that is a value becomes the answer; a ``ScriptReference`` (a
    task folder's ``solution/solve.sh``) is run in the run-phase session, and
    the workspace it leaves is what gets evaluated.
    """

    id = "oracle"
    is_oracle = True
    requires_model = False

    async def run(self, prepared, env, req, plan, context) -> RunResult:
        _ = req, plan
        result = RunResult(task_id=prepared.task_id, attempt=context.attempt)
        if not isinstance(context.reference, ScriptReference):
            result.answer = context.reference
            return result
        ran = await context.reference.run(env)
        log = context.attempt_dir / LOG_NAME
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"exit status {ran.returncode}\n--- stdout\n{ran.stdout}--- stderr\n{ran.stderr}")
        result.artifacts = [LOG_NAME]
        result.metadata = {"reference_exit_status": ran.returncode}
        if ran.timed_out or ran.returncode != 0:
            what = f"timed out after {context.reference.timeout} s" if ran.timed_out else f"exited with status {ran.returncode}"
            result.status = TaskStatus.RUN_ERROR
            result.error_stage = "run"
            result.failure_class = FailureClass.LIMIT if ran.timed_out else FailureClass.HARNESS
            result.error = f"the reference script {context.reference.script} {what}: {ran.stderr[-_TAIL:].strip()}"
        return result
