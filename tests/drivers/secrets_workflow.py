"""Run the real workflow in this process with components that report what their secret params resolved to.

    python secrets_workflow.py WORKDIR CONFIG

Each component resolves its ``probe`` param with ``resolve_secret`` where it
uses it, and writes the SHA-256 of the value (never the value) to a file
in ``$AC_PROBE_DIR``, named after the component: ``benchmark``, ``harness``.
The harness also copies the digests the docker build wrote into its image
(``/build-args.sha``, when the session has it) to ``environment``.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from agentcompass.benchmarks.task_dir import TaskDirBenchmark, TaskDirConfig
from agentcompass.harnesses.chat import ChatConfig, ChatHarness
from agentcompass.runtime import BENCHMARKS, HARNESSES
from agentcompass.runtime.config import config_field
from agentcompass.secrets import resolve_secret


def report(component: str, value: str) -> None:
    path = Path(os.environ["AC_PROBE_DIR"]) / component
    path.write_text(value)


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass(slots=True)
class ProbeTaskDirConfig(TaskDirConfig):
    probe: str = config_field(default="", description="A value the benchmark resolves when it scores.", stage="evaluate")


@BENCHMARKS.register()
class ProbeTaskDir(TaskDirBenchmark):
    id = "test_secret_task_dir"
    config_class = ProbeTaskDirConfig

    async def evaluate(self, task, prepared, result, env, req, plan):
        report("benchmark", digest(resolve_secret(self.build_config(req).probe)))
        return await TaskDirBenchmark.evaluate(self, task, prepared, result, env, req, plan)


@dataclass(slots=True)
class ProbeChatConfig(ChatConfig):
    probe: str = config_field(default="", description="A value the harness resolves when it runs.")


@HARNESSES.register()
class ProbeChat(ChatHarness):
    id = "test_secret_chat"
    config_class = ProbeChatConfig

    async def run(self, prepared, env, req, plan, context):
        report("harness", digest(resolve_secret(plan.params["probe"])))
        built = await env.exec(["cat", "/build-args.sha"])
        if built.ok:
            report("environment", built.stdout)
        return await ChatHarness.run(self, prepared, env, req, plan, context)


def main() -> int:
    from snakemake.cli import args_to_api, parse_args

    from agentcompass import PROJECT_ROOT

    workdir, config = sys.argv[1], sys.argv[2]
    parser, args = parse_args(
        ["--snakefile", str(PROJECT_ROOT / "Snakefile"), "--directory", workdir, "--cores", "2", "--configfile", config]
    )
    return 0 if args_to_api(args, parser) else 1


if __name__ == "__main__":
    sys.exit(main())
