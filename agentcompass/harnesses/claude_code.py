"""``claude_code``: Anthropic's Claude Code CLI, headless (``claude -p``, the prompt on its stdin), behind the model gateway.

It speaks Anthropic's Messages API: the gateway passes its calls through to a Model of protocol
``anthropic`` and translates them for an ``openai_chat`` one. It runs with every permission
(``--dangerously-skip-permissions``: the sandbox is the boundary), at most ``max_turns`` turns, the
Model's id as both its main and its small model, no traffic but its model calls, and no settings but
those of its fresh config folder (a task's ``.claude/settings.json`` cannot point it elsewhere). Its transcript
is its ``stream-json`` output: each assistant message, each tool call with its result, and the final
``result`` event, whose text is the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

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

SOURCE = "claude_code"
# Claude Code retries a failed call itself (10 times by default, minutes apart at the end): few times, so an
# endpoint that is down ends the run soon
RETRIES = 2


@dataclass(slots=True)
class ClaudeCodeConfig(InstalledAgentConfig):
    version: str = version_field("claude-code")
    max_turns: int = max_turns_field()


@HARNESSES.register()
class ClaudeCodeHarness(InstalledAgentHarness):
    """Runs Claude Code (claude -p) in the Environment against a per-attempt model gateway."""

    id = "claude_code"
    config_class = ClaudeCodeConfig
    tool = "claude-code"
    protocol = "anthropic"
    reserved_flags = ("-p", "--print", "--model", "--fallback-model", "--max-turns", "--output-format", "--settings",
                      "--setting-sources", "--permission-mode", "--dangerously-skip-permissions", "--bare")
    reserved_env = ("ANTHROPIC_", "CLAUDE_CODE_", "CLAUDE_CONFIG_DIR", "DISABLE_TELEMETRY", "DISABLE_AUTOUPDATER",
                    "IS_SANDBOX")

    def argv(self, run: AgentRun) -> list[str]:
        # only the settings of its fresh config folder: a task's .claude/settings.json could set its endpoint
        argv = [*run.command, "-p", "--output-format", "stream-json", "--verbose", "--setting-sources",
                "user", "--dangerously-skip-permissions", "--model", run.model]
        return argv + (["--max-turns", str(run.params["max_turns"])] if run.params["max_turns"] else [])

    def stdin(self, run: AgentRun) -> str:
        return run.prompt  # `claude -p` reads the prompt there when none is given: a prompt like a flag is the prompt

    def environment(self, run: AgentRun) -> dict[str, str]:
        variables = {
            "ANTHROPIC_BASE_URL": run.base_url,
            "ANTHROPIC_AUTH_TOKEN": run.token,
            "ANTHROPIC_MODEL": run.model,
            "ANTHROPIC_SMALL_FAST_MODEL": run.model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": run.model,
            "CLAUDE_CONFIG_DIR": f"{run.state}/.claude",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_MAX_RETRIES": str(RETRIES),
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "IS_SANDBOX": "1",  # lets it skip permissions as root, in a container
        }
        if run.params["max_output_tokens"]:
            variables["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(run.params["max_output_tokens"])
        return variables

    def transcript(self, stdout: str) -> Transcript:
        return stream_json_transcript(stdout, SOURCE)
