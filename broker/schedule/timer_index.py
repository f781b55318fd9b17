"""The timer service's index of parked timer messages by due time (event loop).

Entries are (due ms, offset in the timer topic's queue). The many due later wait in one-second
buckets of two packed arrays each (16 bytes an entry, whatever the number of messages a bucket
holds); a bucket is opened, its entries moved into a heap, when it is the next one due. So adding
an entry costs an append, memory stays 16 bytes per parked message plus a little per second that
has any due, and due entries come out in (due, offset) order: by due time, then in the order they
were parked.
"""

from __future__ import annotations

import heapq
from array import array
from dataclasses import dataclass, field

import numpy as np

#: the span of a bucket
BUCKET_MS = 1000


@dataclass(slots=True)
class _Bucket:
    dues: array[int] = field(default_factory=lambda: array("q"))
    offsets: array[int] = field(default_factory=lambda: array("q"))
    earliest: int = 2**63 - 1


class TimerIndex:
    def __init__(self) -> None:
        self._buckets: dict[int, _Bucket] = {}
        self._bucket_order: list[int] = []  # heap of the buckets' numbers
        self._near: list[tuple[int, int]] = []  # heap of the entries of opened buckets
        self._opened = -1  # every bucket up to this one is opened
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, due_ms: int, offset: int) -> None:
        self._size += 1
        bucket = due_ms // BUCKET_MS
        if bucket <= self._opened:
            heapq.heappush(self._near, (due_ms, offset))
            return
        held = self._bucket(bucket)
        held.dues.append(due_ms)
        held.offsets.append(offset)
        held.earliest = min(held.earliest, due_ms)

    def add_many(self, dues: np.ndarray, offsets: np.ndarray) -> None:
        """Add many entries at once (a rebuild at start-up): grouped by bucket with numpy."""
        if not len(dues):
            return
        order = np.argsort(dues // BUCKET_MS, kind="stable")
        dues, offsets = dues[order].astype(np.int64), offsets[order].astype(np.int64)
        buckets = dues // BUCKET_MS
        starts = np.flatnonzero(np.diff(buckets, prepend=buckets[0] - 1))
        earliest = np.minimum.reduceat(dues, starts).tolist()
        bounds = [*starts.tolist(), len(dues)]
        for k, bucket in enumerate(buckets[starts].tolist()):
            start, end = bounds[k], bounds[k + 1]
            if bucket <= self._opened:
                self._near.extend(zip(dues[start:end].tolist(), offsets[start:end].tolist(), strict=True))
                heapq.heapify(self._near)
                continue
            held = self._bucket(bucket)
            held.dues.frombytes(dues[start:end].tobytes())
            held.offsets.frombytes(offsets[start:end].tobytes())
            held.earliest = min(held.earliest, earliest[k])
        self._size += len(dues)

    def _bucket(self, bucket: int) -> _Bucket:
        held = self._buckets.get(bucket)
        if held is None:
            held = self._buckets[bucket] = _Bucket()
            heapq.heappush(self._bucket_order, bucket)
        return held

    def next_due(self) -> int | None:
        """The earliest due time held, None when empty."""
        if self._near:
            return self._near[0][0]
        return self._buckets[self._bucket_order[0]].earliest if self._bucket_order else None

    def pop_due(self, now_ms: int, limit: int) -> list[tuple[int, int]]:
        """Up to `limit` entries due at or before `now_ms`, removed, in (due, offset) order."""
        self._open(now_ms // BUCKET_MS)
        taken: list[tuple[int, int]] = []
        while self._near and self._near[0][0] <= now_ms and len(taken) < limit:
            taken.append(heapq.heappop(self._near))
        self._size -= len(taken)
        return taken

    def _open(self, through: int) -> None:
        """Move the entries of the buckets up to `through` into the heap."""
        opened = False
        while self._bucket_order and self._bucket_order[0] <= through:
            held = self._buckets.pop(heapq.heappop(self._bucket_order))
            self._near.extend(zip(held.dues, held.offsets, strict=True))
            opened = True
        if opened:
            heapq.heapify(self._near)
        self._opened = max(self._opened, through)
