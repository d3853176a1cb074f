"""``codex``: OpenAI's Codex CLI, headless (``codex exec --json``, the prompt on its stdin), behind the model gateway.

It speaks OpenAI's Responses API: the gateway passes its calls through to a Model of protocol
``openai_responses`` and translates them for an ``openai_chat`` one. Its provider is the gateway,
written into ``$CODEX_HOME/config.toml`` (the state folder) with the gateway's token in a variable of
its own; it runs with every permission (``--dangerously-bypass-approvals-and-sandbox``: the sandbox is
the boundary) and few retries of its own. It has no turn limit: ``timeout`` bounds it. Its transcript is
its ``--json`` events: each command it ran with its output, each message, the last message the answer
once its turn completed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from agentcompass.runtime import HARNESSES

from .installed import (
    GATEWAY_TOKEN_VARIABLE,
    AgentRun,
    InstalledAgentConfig,
    InstalledAgentHarness,
    Transcript,
    json_lines,
    message_record,
    tool_record,
    version_field,
)

SOURCE = "codex"
PROVIDER = "agentcompass"
TOKEN_VARIABLE = GATEWAY_TOKEN_VARIABLE
# Codex retries a failed call itself: few times, so an endpoint that is down ends the run soon
RETRIES = 1


@dataclass(slots=True)
class CodexConfig(InstalledAgentConfig):
    version: str = version_field("codex")


def _toml(value) -> str:
    return json.dumps(value)  # a JSON string or number is a TOML basic string or number


@HARNESSES.register()
class CodexHarness(InstalledAgentHarness):
    """Runs Codex (codex exec) in the Environment against a per-attempt model gateway."""

    id = "codex"
    config_class = CodexConfig
    tool = "codex"
    protocol = "openai_responses"
    reserved_flags = ("-c", "--config", "-m", "--model", "-p", "--profile", "--oss", "--local-provider", "--json",
                      "-s", "--sandbox", "--dangerously-bypass-approvals-and-sandbox", "--enable", "--disable")
    reserved_env = ("CODEX_", "OPENAI_", TOKEN_VARIABLE)

    def argv(self, run: AgentRun) -> list[str]:
        return [*run.command, "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                "-m", run.model, "-"]

    def stdin(self, run: AgentRun) -> str:
        return run.prompt  # the prompt '-': read from stdin: a prompt like a flag is the prompt

    def environment(self, run: AgentRun) -> dict[str, str]:
        return {"CODEX_HOME": run.state, TOKEN_VARIABLE: run.token}

    def config_files(self, run: AgentRun) -> dict[str, str]:
        lines = [
            f"model_provider = {_toml(PROVIDER)}",
            f"model = {_toml(run.model)}",
            'approval_policy = "never"',
            'sandbox_mode = "danger-full-access"',
            "check_for_update_on_startup = false",
        ]
        if run.params["max_output_tokens"]:
            lines.append(f"model_max_output_tokens = {int(run.params['max_output_tokens'])}")
        lines += [
            "", f"[model_providers.{PROVIDER}]", f"name = {_toml(PROVIDER)}", f"base_url = {_toml(run.base_url)}",
            'wire_api = "responses"', f"env_key = {_toml(TOKEN_VARIABLE)}",
            f"request_max_retries = {RETRIES}", f"stream_max_retries = {RETRIES}",
            "", "[analytics]", "enabled = false", "", "[otel]", 'exporter = "none"', "",
        ]
        return {"config.toml": "\n".join(lines)}

    def transcript(self, stdout: str) -> Transcript:
        found = Transcript()
        last_message: str | None = None
        for event in json_lines(stdout):
            item: dict = event["item"] if isinstance(event.get("item"), dict) else {}
            kind = item.get("type")
            if event.get("type") == "item.completed" and kind == "command_execution":
                found.records.append(tool_record(SOURCE, "shell", {"command": item.get("command")},
                                                 item.get("aggregated_output") or "", item.get("id"),
                                                 item.get("exit_code") not in (0, None)))
            elif event.get("type") == "item.completed" and kind == "agent_message":
                last_message = str(item.get("text") or "")
                found.records.append(message_record(SOURCE, last_message))
            else:
                found.records.append({"source": SOURCE, "event": event})
                if event.get("type") == "turn.completed":
                    found.answer = last_message
                elif event.get("type") in ("turn.failed", "error"):
                    found.answer = None
                    error: dict = event["error"] if isinstance(event.get("error"), dict) else event
                    found.error = str(error.get("message") or "")
        return found
