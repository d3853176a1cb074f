"""``qwen_code``: the Qwen Code CLI (run by its own Node), headless (``-o stream-json``), behind the model gateway.

It speaks chat completions: its endpoint is the gateway (``OPENAI_BASE_URL``, the gateway's token as
``OPENAI_API_KEY``, the Model's id as ``OPENAI_MODEL`` and ``--model``). Its settings are system settings
(a file of the state folder named by ``QWEN_CODE_SYSTEM_SETTINGS_PATH``), so they win over a task's
``.qwen/settings.json``: the ``openai`` auth type, no telemetry nor usage statistics (it would send them
to a host of its own), no update check, no memory or skill extraction after the run (each a model call
of its own), no next-speaker check, few retries of its own. It runs with every permission (``--yolo``:
the sandbox is the boundary) and at most ``max_turns`` turns (``--max-session-turns``, a hard limit: it
stops there with status 53). The prompt goes on stdin. Its transcript is its ``stream-json`` output:
each assistant message, each tool call with its result, and the final ``result`` event, whose text is
the answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentcompass.runtime import HARNESSES

from .installed import (
    AgentRun,
    InstalledAgentConfig,
    InstalledAgentHarness,
    Transcript,
    max_turns_field,
    stream_json_transcript,
    version_field,
)

SOURCE = "qwen_code"
SETTINGS = "qwen-system-settings.json"
# its own retries of a failed model call (by default 10 for a rate limit, the first after a minute)
RETRIES = 2
RETRY_DELAY_MS = 2000
RETRY_MAX_DELAY_MS = 30000


@dataclass(slots=True)
class QwenCodeConfig(InstalledAgentConfig):
    version: str = version_field("qwen-code")
    max_turns: int = max_turns_field()


@HARNESSES.register()
class QwenCodeHarness(InstalledAgentHarness):
    """Runs Qwen Code (qwen with a piped prompt) in the Environment against a per-attempt model gateway."""

    id = "qwen_code"
    config_class = QwenCodeConfig
    tool = "qwen-code"
    protocol = "openai_chat"
    reserved_flags = ("-m", "--model", "-p", "--prompt", "-i", "--prompt-interactive", "-o", "--output-format",
                      "--input-format", "-y", "--yolo", "--approval-mode", "--auth-type", "--openai-api-key",
                      "--openai-base-url", "--max-session-turns", "--telemetry", "--telemetry-target",
                      "--telemetry-otlp-endpoint", "--telemetry-outfile", "--proxy", "--fallback-model", "-c",
                      "--continue", "-r", "--resume", "-s", "--sandbox", "--acp", "--channel")
    reserved_env = ("OPENAI_", "QWEN_", "GEMINI_", "OTEL_", "SANDBOX")

    def argv(self, run: AgentRun) -> list[str]:
        argv = [*run.command, "--yolo", "--output-format", "stream-json", "--auth-type", "openai", "--model", run.model]
        return argv + (["--max-session-turns", str(run.params["max_turns"])] if run.params["max_turns"] else [])

    def stdin(self, run: AgentRun) -> str:
        return run.prompt

    def environment(self, run: AgentRun) -> dict[str, str]:
        return {
            "OPENAI_BASE_URL": run.base_url,
            "OPENAI_API_KEY": run.token,
            "OPENAI_MODEL": run.model,
            "QWEN_CODE_SYSTEM_SETTINGS_PATH": f"{run.state}/{SETTINGS}",
            "QWEN_TELEMETRY_ENABLED": "false",
            "QWEN_USAGE_STATISTICS_ENABLED": "false",
            "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
            "QWEN_DISABLE_AUTO_TITLE": "1",
        }

    def config_files(self, run: AgentRun) -> dict[str, str]:
        sampling = dict(run.model_params)  # sent in each request's body (temperature, top_p, ...)
        if run.params["max_output_tokens"]:
            sampling["max_tokens"] = int(run.params["max_output_tokens"])
        generation: dict[str, Any] = {"maxRetries": RETRIES, "retryInitialDelayMs": RETRY_DELAY_MS,
                                      "retryMaxDelayMs": RETRY_MAX_DELAY_MS,
                                      "timeout": int(run.params["model_call_timeout"] * 1000)}
        if sampling:
            generation["samplingParams"] = sampling
        settings = {
            "security": {"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": False}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"enableAutoUpdate": False},
            "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False, "enableAutoSkill": False},
            "model": {"name": run.model, "skipNextSpeakerCheck": True, "generationConfig": generation},
        }
        return {SETTINGS: json.dumps(settings, indent=1)}

    def transcript(self, stdout: str) -> Transcript:
        return qwen_transcript(stdout)


def qwen_transcript(stdout: str) -> Transcript:
    """``qwen -o stream-json``'s events; its ``stream_event`` ones (live status, partial text) hold nothing the
    trajectory lacks."""
    return stream_json_transcript(stdout, SOURCE, skipped=("stream_event",))
