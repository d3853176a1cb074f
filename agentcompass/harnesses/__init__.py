"""Built-in Harnesses."""

from .chat import ChatHarness
from .fixed_answer import FixedAnswerHarness
from .oracle import OracleHarness

__all__ = ["ChatHarness", "FixedAnswerHarness", "OracleHarness"]
