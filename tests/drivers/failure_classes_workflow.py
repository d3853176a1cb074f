"""Run the real ``agentcompass`` command line in this process, with a harness whose own code raises.

    python failure_classes_workflow.py WORKDIR ARG...   (ARG...: the command line, e.g. run --config c.yaml)

``test_raises`` counts its runs in a file beside the attempt's other files and
raises a ``ValueError`` whose message speaks of a dead sandbox and a timeout:
the message must not move it out of the ``harness`` class. The harnesses of
``flaky_workflow`` (``test_sandbox_fault``: a sandbox ended from outside) are
registered too.
"""

from __future__ import annotations

import os
import sys

import flaky_workflow  # noqa: F401 (registers test_flaky_sandbox and test_sandbox_fault)

from agentcompass.runtime import HARNESSES, BaseHarness, RunResult


@HARNESSES.register()
class Raises(BaseHarness):
    """The agent's own code raising: no model, no sandbox fault."""

    id = "test_raises"
    requires_model = False

    async def run(self, prepared, env, req, plan, context) -> RunResult:
        counter = context.attempt_dir / "raises-calls"
        counter.write_text(str(int(counter.read_text()) + 1 if counter.exists() else 1))
        raise ValueError("the sandbox died: connection timeout (a message, not a type)")


def main() -> int:
    from agentcompass import cli

    os.chdir(sys.argv[1])
    return cli.main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
