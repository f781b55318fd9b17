"""Planning a read: which offsets of which queues each Spark partition reads, and how much a
micro-batch may take under a read limit."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from rocketspark.client.allocation import averagely_by_index
from rocketspark.message.queue import MessageQueue


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


@dataclass(frozen=True)
class RocketMQPartition(InputPartition):
    """What one Spark task reads: ranges of a contiguous block of the sorted queues."""

    index: int
    ranges: tuple[QueueRange, ...]


def plan_partitions(
    start: dict[MessageQueue, int], end: dict[MessageQueue, int], num_partitions: int | None
) -> list[RocketMQPartition]:
    """Allocate the sorted queues to partitions as AllocateMessageQueueAveragely allocates queues to
    consumers (partition i of n reads what consumer i of n would get), so a partition keeps its
    queues from batch to batch while the queue set stays the same. Partitions with nothing to read
    are not planned."""
    queues = sorted(end)
    if not queues:
        return []
    count = min(num_partitions or len(queues), len(queues))
    partitions = []
    for index in range(count):
        ranges = tuple(
            QueueRange(q.topic, q.broker_name, q.queue_id, start.get(q, end[q]), end[q])
            for q in averagely_by_index(queues, index, count)
            if end[q] > start.get(q, end[q])
        )
        if ranges:
            partitions.append(RocketMQPartition(index, ranges))
    return partitions


def limit_ends(
    start: dict[MessageQueue, int], latest: dict[MessageQueue, int], max_messages: int
) -> dict[MessageQueue, int]:
    """End offsets that take at most `max_messages` in all, shared in proportion to each queue's
    backlog (largest remainders first, larger backlogs winning ties), so a queue with a backlog
    is not starved: the queues that advanced now have less backlog and lose the next tie."""
    backlog = {q: max(0, latest[q] - start.get(q, latest[q])) for q in latest}
    total = sum(backlog.values())
    if total <= max_messages:
        return dict(latest)
    exact = {q: max_messages * b / total for q, b in backlog.items()}
    shares = {q: math.floor(e) for q, e in exact.items()}
    left = max_messages - sum(shares.values())
    by_remainder = sorted(
        (q for q in latest if backlog[q] > shares[q]), key=lambda q: (-(exact[q] - shares[q]), -backlog[q], q)
    )
    for queue in by_remainder[:left]:
        shares[queue] += 1
    return {q: start.get(q, latest[q]) + shares[q] for q in latest}
