"""`OffsetRanges`: a set of queue offsets kept as disjoint, sorted [start, end) ranges.

A window's finished offsets above its base (broker/pop/queue_state.py) are mostly runs: messages
acknowledged in about the order they were delivered, stretches a tag filter passed over. Kept as
ranges, a window costs memory by its gaps (the messages still in flight), not by how many messages
were finished behind one that stays in flight for hours.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator


class OffsetRanges:
    __slots__ = ("_ends", "_starts")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        for start, end in ranges:
            self.add_range(start, end)

    def __contains__(self, offset: int) -> bool:
        i = bisect.bisect_right(self._starts, offset) - 1
        return i >= 0 and offset < self._ends[i]

    def __len__(self) -> int:
        """How many ranges (not offsets)."""
        return len(self._starts)

    def ranges(self) -> Iterator[tuple[int, int]]:
        return zip(self._starts, self._ends, strict=True)

    def add(self, offset: int) -> None:
        self.add_range(offset, offset + 1)

    def add_range(self, start: int, end: int) -> None:
        """Add [start, end), merging it with the ranges it overlaps or touches."""
        if start >= end:
            return
        first = bisect.bisect_left(self._ends, start)  # the first range ending at or after `start`
        last = bisect.bisect_right(self._starts, end)  # one past the last range starting at or before `end`
        if first < last:
            start = min(start, self._starts[first])
            end = max(end, self._ends[last - 1])
        self._starts[first:last] = [start]
        self._ends[first:last] = [end]

    def take_prefix(self, base: int) -> int:
        """When a range starts at `base`: remove it and return its end; else return `base`."""
        if self._starts and self._starts[0] == base:
            del self._starts[0]
            return self._ends.pop(0)
        return base

    def drop_below(self, offset: int) -> None:
        """Forget every offset below `offset`."""
        i = bisect.bisect_right(self._ends, offset)
        del self._starts[:i]
        del self._ends[:i]
        if self._starts and self._starts[0] < offset:
            self._starts[0] = offset

    def clear(self) -> None:
        self._starts.clear()
        self._ends.clear()
