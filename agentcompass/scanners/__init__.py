"""Built-in transcript scanners (the scan stage): none of them calls a model."""

from .builtin import GaveUpScanner, GraderAccessScanner, HistoryRewriteScanner, NetworkScanner

__all__ = ["GaveUpScanner", "GraderAccessScanner", "HistoryRewriteScanner", "NetworkScanner"]
