"""Built-in Harnesses."""

from .chat import ChatHarness
from .claude_code import ClaudeCodeHarness
from .codex import CodexHarness
from .fixed_answer import FixedAnswerHarness
from .mini_swe_agent import MiniSweAgentHarness
from .opencode import OpencodeHarness
from .oracle import OracleHarness
from .qwen_code import QwenCodeHarness
from .tool_agent import ToolAgentHarness

__all__ = ["ChatHarness", "ClaudeCodeHarness", "CodexHarness", "FixedAnswerHarness", "MiniSweAgentHarness",
           "OpencodeHarness", "OracleHarness", "QwenCodeHarness", "ToolAgentHarness"]
