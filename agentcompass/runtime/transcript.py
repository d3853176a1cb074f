"""An attempt's transcript as the scanners read it: its trajectory's steps, bounded, as plain values.

``read_transcript`` reads an attempt folder's ``trajectory.jsonl`` (whoever wrote it: the harnesses'
``model_call`` and ``tool_result`` lines, the model gateway's records, an installed agent's own) and its
``result.json``, and turns them into ``Action``s: each tool call or command the agent made, each output
it was shown, each refusal of the gateway or sandbox, each message. All of it is the agent's text, so
untrusted: what is read is capped (``READ_LIMIT`` bytes, ``LINE_LIMIT`` per line, ``STEP_LIMIT`` lines,
``TEXT_LIMIT`` characters per action, ``DEPTH_LIMIT`` of nesting), nothing of it is run or followed, and
``quote`` makes a piece of it short and printable.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from agentcompass._util.display import visible
from agentcompass.layout import TRAJECTORY

from .models import TaskSpec
from .models.scan import QUOTE_LIMIT

# the most bytes of trajectory.jsonl read (a longer one is read to here: ``Transcript.truncated``)
READ_LIMIT = 32 << 20
# a longer line is skipped whole (a trajectory cuts its records well below this)
LINE_LIMIT = 8 << 20
# the most lines read
STEP_LIMIT = 50_000
# the most characters of one action's text kept
TEXT_LIMIT = 16 << 10
# how deep a record is walked for tool calls
DEPTH_LIMIT = 24
# the most actions one transcript holds
ACTION_LIMIT = 100_000

# what an action is
TOOL_CALL = "tool_call"  # a tool the agent called, or a command it ran: ``tool`` and ``text`` (its command)
OUTPUT = "output"  # what a tool call returned to the agent
REFUSAL = "refusal"  # the gateway or the sandbox refused what the agent asked
MESSAGE = "message"  # the agent's text

# the keys of a tool call's arguments that name a file, and that hold a command
_PATH_KEYS = ("path", "file_path", "filename", "file", "notebook_path")
_COMMAND_KEYS = ("command", "cmd", "script")
# the agents whose commands are the fenced shell blocks of their messages (their records' ``source``)
FENCED_COMMANDS = ("mini_swe_agent",)
# a fenced shell block in an agent's message (mini-swe-agent's actions)
_FENCE = re.compile(r"```(?:bash|sh|shell)?[ \t]*\n(.*?)```", re.S)
# the files a unified diff touches
_DIFF_FILE = re.compile(r"^(?:diff --git a/(\S+) b/(\S+)|\+\+\+ b/(\S+))", re.M)


@dataclass(frozen=True)
class Action:
    """One thing of the transcript: at ``step`` (the line of trajectory.jsonl, from 0), its ``kind``, the
    tool it called (None for a message), its text (the command, the arguments, the output) and a file."""

    step: int
    kind: str
    text: str
    tool: str | None = None
    file: str | None = None


@dataclass(frozen=True)
class Transcript:
    """What a scanner reads of one attempt: its task, its result.json as read, its actions in order, its
    final answer, the files it wrote (its answer's diff, its artifacts) and whether reading stopped at a cap."""

    task: TaskSpec | None
    result: dict[str, Any]
    actions: tuple[Action, ...]
    answer: Any = None
    files_written: tuple[str, ...] = ()
    truncated: bool = False
    problems: tuple[str, ...] = field(default=())
    # how many lines of trajectory.jsonl were read (the last step is one less)
    steps: int = 0

    def of_kind(self, *kinds: str) -> Iterator[Action]:
        return (a for a in self.actions if a.kind in kinds)

    @property
    def tool_calls(self) -> int:
        return sum(1 for _ in self.of_kind(TOOL_CALL))


def quote(text: Any, limit: int = QUOTE_LIMIT) -> str:
    """``text`` (any value) as a short, printable, one-line quote of at most ``limit`` characters."""
    line = visible(text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)[:limit * 4])
    return line if len(line) <= limit else line[:limit - 1] + "…"


def _cut(text: str) -> str:
    return text[:TEXT_LIMIT]


def _text(value: Any) -> str:
    """A value as text: a string as is, else compact JSON (cut)."""
    if isinstance(value, str):
        return _cut(value)
    try:
        return _cut(json.dumps(value, ensure_ascii=False, sort_keys=True, default=str))
    except (TypeError, ValueError):
        return _cut(str(value))


def _arguments(value: Any) -> Any:
    """A tool call's arguments: a JSON object given as text is read (bounded), else kept as is."""
    if isinstance(value, str) and len(value) <= TEXT_LIMIT:
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _call(step: int, name: Any, arguments: Any) -> Action:
    """A tool call as an action: its command when it has one, its file when it names one."""
    args = _arguments(arguments)
    tool = str(name)[:200] if name is not None else None
    command = file = None
    if isinstance(args, dict):
        command = next((args[k] for k in _COMMAND_KEYS if isinstance(args.get(k), str)), None)
        file = next((args[k] for k in _PATH_KEYS if isinstance(args.get(k), str)), None)
    text = _text(command if command is not None else args)
    return Action(step, TOOL_CALL, text, tool, file[:1000] if file else None)


def _walk(value: Any, step: int, depth: int = 0) -> Iterator[Action]:
    """The tool calls and the assistant text inside a model's reply, in every protocol's shape."""
    if depth > DEPTH_LIMIT:
        return
    if isinstance(value, dict):
        function = value.get("function")
        if isinstance(function, dict) and "name" in function:  # chat completions
            yield _call(step, function.get("name"), function.get("arguments"))
            return
        kind = value.get("type")
        if kind in ("tool_use", "server_tool_use") and "name" in value:  # Anthropic's Messages
            yield _call(step, value.get("name"), value.get("input"))
            return
        if kind in ("function_call", "local_shell_call", "custom_tool_call") and ("name" in value or "action" in value):
            yield _call(step, value.get("name") or kind, value.get("arguments") or value.get("input") or value.get("action"))
            return  # OpenAI's Responses
        if value.get("role") == "assistant" and isinstance(value.get("content"), str) and value["content"].strip():
            yield Action(step, MESSAGE, _cut(value["content"]))
        if kind in ("text", "output_text") and isinstance(value.get("text"), str) and value["text"].strip():
            yield Action(step, MESSAGE, _cut(value["text"]))
        for key, item in value.items():
            if key not in ("content",) or not isinstance(item, str):
                yield from _walk(item, step, depth + 1)
    elif isinstance(value, list):
        for item in value[:10_000]:
            yield from _walk(item, step, depth + 1)


def _record_actions(record: dict[str, Any], step: int) -> Iterator[Action]:
    """The actions of one line of trajectory.jsonl."""
    kind, source = record.get("type"), record.get("source")
    error = record.get("error")
    if isinstance(error, str) and error.startswith("refused"):  # the gateway's refusal of a call
        yield Action(step, REFUSAL, _cut(f"{error} {record.get('method', '')} {record.get('path', '')}".strip()),
                     tool=str(source) if source else None)
    if kind == "tool_result":  # a harness's tool call and what it returned
        yield _call(step, record.get("name"), record.get("arguments"))
        if record.get("output") not in (None, ""):
            yield Action(step, OUTPUT, _text(record.get("output")), tool=str(record.get("name")))
        return
    if kind == "model_call" or source == "gateway":
        yield from _walk(record.get("reply"), step)  # the request repeats the history: not read
        return
    message = record.get("message")
    if isinstance(message, dict) and isinstance(message.get("content"), str):  # an agent's own messages
        content = message["content"]
        if message.get("role") == "assistant":
            if content.strip():
                yield Action(step, MESSAGE, _cut(content))
            if source in FENCED_COMMANDS:  # its commands are the shell blocks of its messages
                for block in _FENCE.findall(content[:TEXT_LIMIT * 4]):
                    yield Action(step, TOOL_CALL, _cut(block.strip()), tool="bash")
            yield from _walk(message.get("tool_calls"), step)  # an installed agent's, in chat shape
        elif content.strip():
            yield Action(step, OUTPUT, _cut(content))
        return
    yield from _walk(record, step)


def _lines(path: Path) -> Iterator[tuple[int, Any, bool]]:
    """(step, the line's JSON value or None, whether reading stopped at a cap) of ``path``, bounded."""
    read = 0
    with path.open("rb") as handle:
        for step in range(STEP_LIMIT + 1):
            if step == STEP_LIMIT:
                yield step, None, bool(handle.read(1))
                return
            line = handle.readline(LINE_LIMIT + 1)
            if not line:
                return
            read += len(line)
            if read > READ_LIMIT:
                yield step, None, True
                return
            if len(line) > LINE_LIMIT:  # skip the rest of an over-long line
                while line and not line.endswith(b"\n"):
                    line = handle.readline(LINE_LIMIT)
                    read += len(line)
                continue
            try:
                yield step, json.loads(line.decode("utf-8", "replace")), False
            except ValueError:
                yield step, None, False


def diff_files(text: Any) -> list[str]:
    """The files a unified diff (an answer that is a patch) touches, each once, in order."""
    if not isinstance(text, str):
        return []
    found = (next(g for g in m.groups() if g) for m in _DIFF_FILE.finditer(text[:READ_LIMIT]))
    return list(dict.fromkeys(found))


def read_transcript(folder: Path, result: dict[str, Any], task: TaskSpec | None = None) -> Transcript:
    """The transcript of the attempt in ``folder`` (its trajectory.jsonl, if it has one) and ``result``."""
    actions: list[Action] = []
    truncated = False
    problems: list[str] = []
    steps = 0
    path = Path(folder) / TRAJECTORY
    if path.is_file():
        seen: set[tuple[str, str | None, str]] = set()
        for step, record, cut in _lines(path):
            truncated = truncated or cut
            steps = step + 1 if not cut else steps
            if not isinstance(record, dict):
                continue
            for action in _record_actions(record, step):
                key = (action.kind, action.tool, action.text)
                if key in seen:  # a call its model_call and its tool_result both hold: the first
                    continue
                seen.add(key)
                actions.append(action)
                if len(actions) >= ACTION_LIMIT:
                    truncated = True
                    break
            if len(actions) >= ACTION_LIMIT:
                break
    else:
        problems.append(f"no {TRAJECTORY}")
    answer = result.get("answer")
    written = [*diff_files(answer), *(str(a) for a in result.get("artifacts") or [] if isinstance(a, str))]
    written += [a.file for a in actions if a.kind == TOOL_CALL and a.file and (a.tool or "").lower() in _WRITERS]
    return Transcript(task, result, tuple(actions), answer, tuple(dict.fromkeys(written)), truncated, tuple(problems),
                      steps)


# the tools that write the file they name
_WRITERS = ("write_file", "write", "edit", "multiedit", "str_replace_editor", "create_file", "apply_patch",
            "notebookedit")
