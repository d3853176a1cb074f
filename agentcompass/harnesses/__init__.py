"""Built-in Harnesses."""

from .chat import ChatHarness
from .claude_code import ClaudeCodeHarness
from .codex import CodexHarness
from .fixed_answer import FixedAnswerHarness
from .mini_swe_agent import MiniSweAgentHarness
from .oracle import OracleHarness
from .tool_agent import ToolAgentHarness

__all__ = ["ChatHarness", "ClaudeCodeHarness", "CodexHarness", "FixedAnswerHarness", "MiniSweAgentHarness", "OracleHarness",
           "ToolAgentHarness"]
