"""``chat``: plain chat completion, one or more turns; the answer is the final reply.

With tools in the task input (OpenAI function-tool format), the tools are
offered to the model and the answer is the list of calls of the final reply,
``[{"name": ..., "arguments": {...}}, ...]`` in reply order (empty when the
model calls none); arguments that are not a JSON object stay as their raw text.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentcompass.runtime import HARNESSES, BaseHarness, RunResult
from agentcompass.runtime.config import ConfigError, config_field
from agentcompass.runtime.model_client import ChatReply, ModelCallConfig, ModelCallError, ModelClient

from .common import Trajectory, call_model, opening_messages, run_error


@dataclass(slots=True)
class ChatConfig(ModelCallConfig):
    follow_ups: list = config_field(
        default=[],
        description="Further user turns, sent one at a time after each reply; the answer is the last reply's.",
    )

    def __post_init__(self) -> None:
        ModelCallConfig.__post_init__(self)
        if not isinstance(self.follow_ups, list) or not all(isinstance(t, str) for t in self.follow_ups):
            raise ConfigError(f"follow_ups must be a list of strings, got {self.follow_ups!r}")


def _answer(reply: ChatReply, tools: list[dict]):
    return [call.as_answer() for call in reply.tool_calls] if tools else reply.text


def _unanswered_tool_results(reply: ChatReply) -> list[dict]:
    # A conversation goes on only once every tool call has a result; this harness runs none.
    return [{"role": "tool", "tool_call_id": call.id, "content": "(not run: this harness only records tool calls)"}
            for call in reply.tool_calls]


@HARNESSES.register()
class ChatHarness(BaseHarness):
    """Sends the prompt (and any follow-up turns) to the Model; answers with the final reply."""

    id = "chat"
    version = "2"
    config_class = ChatConfig

    async def run(self, prepared, env, req, plan, context) -> RunResult:
        _ = env
        messages = opening_messages(prepared)
        tools = list(prepared.input.tools)
        trajectory = Trajectory(context.trajectory_path)
        client = None
        try:
            async with ModelClient(req.model, ModelCallConfig.from_params(plan.params)) as client:
                reply = await call_model(client, trajectory, messages, tools, turn=1)
                messages.append(reply.message)
                for turn, follow_up in enumerate(plan.params.get("follow_ups", []), start=2):
                    messages.extend([*_unanswered_tool_results(reply), {"role": "user", "content": follow_up}])
                    reply = await call_model(client, trajectory, messages, tools, turn=turn)
                    messages.append(reply.message)
        except ModelCallError as exc:
            return run_error(prepared, context.attempt, exc, client)
        metadata = {"malformed_reply": reply.malformed} if reply.malformed else {}
        if tools and reply.text:
            metadata["text"] = reply.text
        return RunResult(task_id=prepared.task_id, attempt=context.attempt, answer=_answer(reply, tools),
                         usage=client.usage.as_dict(), metadata=metadata)

