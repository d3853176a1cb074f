"""Built-in Analyzers."""

from .results_table import ResultsTableAnalyzer

__all__ = ["ResultsTableAnalyzer"]
