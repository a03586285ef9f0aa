"""spans: closed integer intervals."""

from spans.intervals import Interval, covered_length, gaps, merge

__all__ = ["Interval", "covered_length", "gaps", "merge"]
__version__ = "0.2.0"
