"""Splitting queue ranges into more Spark partitions than there are queues (`minPartitions`,
`maxRecordsPerPartition`), by offset, as Spark's Kafka connector splits topic partitions
(`KafkaOffsetRangeCalculator`).

A pure function of the ranges and the two numbers: the same batch is always split the same way, so
a replayed micro-batch reads the same messages in the same partitions. Parts of one queue share
nothing while they are read: each is an offset range of its own (`QueueRange`), pulled from its
start, and cut at its end, like any range.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from rocketspark.protocol.queue import MessageQueue


@dataclass(frozen=True, slots=True)
class QueueRange:
    """Offsets [start, end) of one queue."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)


def split_ranges(
    ranges: Iterable[QueueRange], *, min_partitions: int | None = None, max_records: int | None = None
) -> list[QueueRange]:
    """The non-empty `ranges`, split so that no part spans more than `max_records` offsets and
    there are at least `min_partitions` parts (unless the ranges span fewer offsets than that).

    `max_records` first cuts each longer range into the fewest parts of near-equal size. Then, when
    there are fewer parts than `min_partitions`, Kafka's rule: a part whose share of all offsets
    is worth at most one partition (its size / total * minPartitions rounds to 1 or less) stays
    whole, the others share the remaining partitions in proportion to their size. Kafka's rounding
    can leave fewer parts than asked for (three equal ranges and minPartitions=4 stay three); here
    the largest part is then halved until there are enough, so the count is a lower bound.
    Parts come back in queue and offset order."""
    splits = [r for r in ranges if r.end > r.start]
    if max_records is not None:
        splits = [p for r in splits for p in _cut(r, math.ceil(_size(r) / max_records))]
    if min_partitions is not None and len(splits) < min_partitions:
        splits = _proportional(splits, min_partitions)
        while len(splits) < min_partitions and any(_size(p) > 1 for p in splits):
            at = max(range(len(splits)), key=lambda i: (_size(splits[i]), -i))
            splits[at : at + 1] = _cut(splits[at], 2)
    return sorted(splits, key=lambda p: (p.queue, p.start))


def _size(queue_range: QueueRange) -> int:
    return queue_range.end - queue_range.start


def _round_half_up(value: float) -> int:
    return math.floor(value + 0.5)


def _parts(size: int, total: int, partitions: int) -> int:
    return max(_round_half_up(size / total * partitions), 1)


def _proportional(splits: list[QueueRange], min_partitions: int) -> list[QueueRange]:
    total = sum(map(_size, splits))
    whole = [p for p in splits if _parts(_size(p), total, min_partitions) == 1]
    split_total = total - sum(map(_size, whole))
    split_partitions = max(min_partitions - len(whole), 1)
    result = []
    for split in splits:
        parts = 1 if split in whole else _parts(_size(split), split_total, split_partitions)
        result.extend(_cut(split, parts))
    return result


def _cut(queue_range: QueueRange, parts: int) -> list[QueueRange]:
    """`queue_range` in `parts` consecutive parts whose sizes differ by at most one (the later
    parts take the remainder); never an empty part."""
    parts = max(1, min(parts, _size(queue_range)))
    splits = []
    start, remaining = queue_range.start, _size(queue_range)
    for index in range(parts):
        size = remaining // (parts - index)
        splits.append(replace(queue_range, start=start, end=start + size))
        start += size
        remaining -= size
    return splits
