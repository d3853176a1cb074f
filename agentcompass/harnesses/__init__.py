"""Built-in Harnesses."""

from .chat import ChatHarness
from .fixed_answer import FixedAnswerHarness
from .oracle import OracleHarness
from .tool_agent import ToolAgentHarness

__all__ = ["ChatHarness", "FixedAnswerHarness", "OracleHarness", "ToolAgentHarness"]
