"""Closed intervals ``[start, end]`` on a line, and the usual set operations on lists of them.

Two intervals that share an end point (``[1, 3]`` and ``[3, 5]``) overlap at that point, so they merge.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Interval:
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"interval end {self.end} is before its start {self.start}")

    @property
    def length(self) -> int:
        return self.end - self.start

    def overlaps(self, other: Interval) -> bool:
        return self.start <= other.end and other.start <= self.end

    def contains(self, point: int) -> bool:
        return self.start <= point <= self.end


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """The smallest sorted list of disjoint intervals covering the same points."""
    merged: list[Interval] = []
    for current in sorted(intervals):
        if merged and current.start < merged[-1].end:
            last = merged.pop()
            current = Interval(last.start, max(last.end, current.end))
        merged.append(current)
    return merged


def covered_length(intervals: Iterable[Interval]) -> int:
    """Total length covered by the intervals, counting overlaps once."""
    return sum(interval.length for interval in merge(intervals))


def gaps(intervals: Iterable[Interval], within: Interval) -> list[Interval]:
    """The parts of ``within`` that no interval covers, as intervals between the covered parts."""
    result: list[Interval] = []
    cursor = within.start
    for interval in merge(intervals):
        if interval.end < within.start or interval.start > within.end:
            continue
        if interval.start > cursor:
            result.append(Interval(cursor, interval.start))
        cursor = max(cursor, interval.end)
    if cursor < within.end:
        result.append(Interval(cursor, within.end))
    return result
