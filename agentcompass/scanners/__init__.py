"""Built-in transcript scanners (the scan stage): four that call no model, and ``judge``, which asks a judge Model."""

from .builtin import GaveUpScanner, GraderAccessScanner, HistoryRewriteScanner, NetworkScanner
from .judge import JudgeScanner

__all__ = ["GaveUpScanner", "GraderAccessScanner", "HistoryRewriteScanner", "JudgeScanner", "NetworkScanner"]
