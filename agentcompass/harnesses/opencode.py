"""``opencode``: the opencode CLI, headless (``opencode run --format json``), behind the model gateway.

It speaks chat completions: its provider is the gateway, an ``@ai-sdk/openai-compatible`` provider
written into its config (``opencode.json`` in the state folder, named by ``OPENCODE_CONFIG``) with the
gateway's token read from a variable of its own (``{env:...}``). It runs with every permission
(``--auto``: the sandbox is the boundary), the Model's id as both its main and its small model, and a
session title given, so no call names the session. Offline by construction: models.dev is not fetched
(its bundled snapshot is used), no update is checked, no project config is read, and its plugin folder
is written as installed so it fetches nothing from npm. Its ``steps`` (``max_turns``) is soft: at that
call opencode tells the model that tools are off, and a model that calls them anyway runs on until
``timeout``. The prompt goes on stdin (opencode would quote it on its command line). Its transcript is
its JSON events: each step's text and tool calls with their results, the text of the last step that
did not end in tool calls the answer; an ``error`` event is the run's error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentcompass.runtime import HARNESSES

from .installed import (
    GATEWAY_TOKEN_VARIABLE,
    AgentRun,
    InstalledAgentConfig,
    InstalledAgentHarness,
    Transcript,
    json_lines,
    max_turns_field,
    message_record,
    tool_record,
    version_field,
)

SOURCE = "opencode"
PROVIDER = "agentcompass"
TOKEN_VARIABLE = GATEWAY_TOKEN_VARIABLE
CONFIG = "opencode.json"
TITLE = "agentcompass"
# its plugin folder, marked as holding @opencode-ai/plugin already: else it runs an npm install at start
PLUGIN_LOCK = {"lockfileVersion": 3, "packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}}


@dataclass(slots=True)
class OpencodeConfig(InstalledAgentConfig):
    version: str = version_field("opencode")
    max_turns: int = max_turns_field()


@HARNESSES.register()
class OpencodeHarness(InstalledAgentHarness):
    """Runs opencode (opencode run) in the Environment against a per-attempt model gateway."""

    id = "opencode"
    config_class = OpencodeConfig
    tool = "opencode"
    protocol = "openai_chat"
    reserved_flags = ("-m", "--model", "--format", "--auto", "--agent", "--title", "--attach", "--share", "-c",
                      "--continue", "-s", "--session", "--fork", "--dir", "--port", "--command")
    reserved_env = ("OPENCODE_", "XDG_", TOKEN_VARIABLE)

    def argv(self, run: AgentRun) -> list[str]:
        return [*run.command, "run", "--format", "json", "--auto", "--title", TITLE, "--model", f"{PROVIDER}/{run.model}",
                "--print-logs", "--log-level", "WARN"]

    def stdin(self, run: AgentRun) -> str:
        return run.prompt

    def environment(self, run: AgentRun) -> dict[str, str]:
        return {
            TOKEN_VARIABLE: run.token,
            "OPENCODE_CONFIG": f"{run.state}/{CONFIG}",
            "XDG_CONFIG_HOME": f"{run.state}/.config",
            "XDG_DATA_HOME": f"{run.state}/.local/share",
            "XDG_CACHE_HOME": f"{run.state}/.cache",
            "XDG_STATE_HOME": f"{run.state}/.local/state",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_SHARE": "1",
        }

    def config_files(self, run: AgentRun) -> dict[str, str]:
        model: dict[str, Any] = {"name": run.model, "tool_call": True}
        if run.model_params:  # sent in each request's body (temperature, top_p, ...)
            model["options"] = dict(run.model_params)
        if run.params["max_output_tokens"]:
            model["limit"] = {"context": 0, "output": int(run.params["max_output_tokens"])}
        config: dict[str, Any] = {
            "provider": {PROVIDER: {
                "npm": "@ai-sdk/openai-compatible", "name": PROVIDER, "models": {run.model: model},
                "options": {"baseURL": run.base_url, "apiKey": f"{{env:{TOKEN_VARIABLE}}}"},
            }},
            "model": f"{PROVIDER}/{run.model}",
            "small_model": f"{PROVIDER}/{run.model}",
            "autoupdate": False,
            "share": "disabled",
            "snapshot": False,  # no git copy of the workspace in its data folder
        }
        if run.params["max_turns"]:
            config["agent"] = {"build": {"steps": int(run.params["max_turns"])}}
        return {CONFIG: json.dumps(config, indent=1),
                ".config/opencode/package-lock.json": json.dumps(PLUGIN_LOCK),
                ".config/opencode/node_modules/.keep": ""}

    def transcript(self, stdout: str) -> Transcript:
        return opencode_transcript(stdout)


def opencode_transcript(stdout: str) -> Transcript:
    """``opencode run --format json``'s events: per step, a message with its text and tool calls, then each call's
    result; the text of the last step that ended for another reason than tool calls is the answer."""
    found = Transcript()
    texts: list[str] = []
    tools: list[dict] = []
    for event in json_lines(stdout):
        kind = event.get("type")
        part: dict = event["part"] if isinstance(event.get("part"), dict) else {}
        if kind == "step_start":
            texts, tools = [], []
        elif kind == "text":
            texts.append(str(part.get("text") or ""))
        elif kind == "tool_use":
            tools.append(part)
        elif kind == "step_finish":
            calls = [(str(t.get("callID")), str(t.get("tool")), _state(t).get("input")) for t in tools]
            found.records.append(message_record(SOURCE, "\n".join(texts), calls))
            for tool in tools:
                state = _state(tool)
                failed = state.get("status") != "completed"
                found.records.append(tool_record(SOURCE, str(tool.get("tool")), state.get("input"),
                                                 state.get("error") if failed else state.get("output") or "",
                                                 tool.get("callID"), failed))
            found.records.append({"source": SOURCE, "event": event})
            if part.get("reason") != "tool-calls":
                found.answer = "\n".join(texts)
            texts, tools = [], []
        else:
            found.records.append({"source": SOURCE, "event": event})
            if kind == "error":
                error: dict = event["error"] if isinstance(event.get("error"), dict) else {}
                data: dict = error["data"] if isinstance(error.get("data"), dict) else {}
                found.error = str(data.get("message") or error.get("name") or "error")
                found.answer = None
    return found


def _state(tool: dict) -> dict:
    return tool["state"] if isinstance(tool.get("state"), dict) else {}
