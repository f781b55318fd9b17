"""Planning a read: where the next micro-batch of a stream ends, how much it may take under a read
limit, and which offsets of which queues each Spark partition reads.

The micro-batch planning (`observe`, then `plan_batch`) asks the cluster only through
`OffsetView`, so its rules are checked with a fake view (tests/unit/test_batch_planning.py):

- a queue seen for the first time joins at the offset the starting option places it at;
- a queue that no route lists any more waits while its broker is not registered (it may come
  back), and is data loss otherwise (its topic was deleted or has fewer queues);
- a queue whose broker did not answer keeps its offset;
- a queue whose max offset is below the query's offset started over (RocketMQ's offsets never go
  down: its topic was deleted and created again, or its broker lost its store). That is data loss;
  with failOnDataLoss=false the queue is read again from its first message: the batch that notices
  it moves the queue back to its min offset and reads nothing of it, the next ones read on from there;
- the others advance to their max offset, or to the Trigger.AvailableNow target, shared by the
  read limit.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from pyspark.sql.datasource import InputPartition

from rocketspark.client.consumer.allocation import averagely_by_index
from rocketspark.errors import DataLossError
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark.source.splitting import QueueRange, split_ranges

log = logging.getLogger(__name__)

Offsets = dict[MessageQueue, int]


class OffsetView(Protocol):
    """What planning a micro-batch asks the cluster (`rocketspark.spark.source.queue_view.QueueView`).

    `unreachable` names the queues whose broker did not answer a question asked through the view."""

    unreachable: dict[MessageQueue, str]

    def live_brokers(self) -> set[str]: ...

    def max_offsets(self, queues: Iterable[MessageQueue]) -> Offsets: ...

    def min_offsets(self, queues: Iterable[MessageQueue]) -> Offsets: ...


@dataclass(frozen=True, slots=True)
class Observed:
    """The queues as the driver sees them at the start of planning a micro-batch."""

    begin: Offsets  # where the previous batch ended, without the queues lost for good
    latest: Offsets  # max offsets of the queues whose broker answered
    waiting: dict[MessageQueue, str] = field(default_factory=dict)  # queues that cannot be read now, and why
    lost: Offsets = field(default_factory=dict)  # queues no route lists any more, their broker registered

    @property
    def moved_back(self) -> list[MessageQueue]:
        """Queues whose max offset is below the query's offset: they started over."""
        return sorted(q for q, o in self.latest.items() if q in self.begin and o < self.begin[q])


@dataclass(frozen=True, slots=True)
class BatchRules:
    """How to plan: the source's options and the run's state."""

    fail_on_data_loss: bool
    #: where a queue seen for the first time starts (the starting option as of the query's start);
    #: queues it leaves out (their broker did not answer) are placed when seen again
    place: Callable[[list[MessageQueue]], Offsets]
    max_rows: int | None = None  # maxMessagesPerTrigger
    target: Mapping[MessageQueue, int] | None = None  # Trigger.AvailableNow's end


@dataclass(frozen=True, slots=True)
class Plan:
    ends: Offsets  # the batch's end offsets
    placed: Offsets = field(default_factory=dict)  # queues seen for the first time, where they start
    restarted: Offsets = field(default_factory=dict)  # queues that started over, where they are read from


def observe(
    view: OffsetView, begin: Offsets, queues: list[MessageQueue], *, live_before: set[str] | None = None
) -> Observed:
    """What `view` says of the `queues` the routes list now, for a batch beginning at `begin`;
    `live_before`: the live brokers asked before the routes were (see :func:`settle_missing`)."""
    latest = view.max_offsets(queues)
    kept, away, lost = settle_missing(view, begin, set(queues), live_before)
    return Observed(kept, latest, {**away, **view.unreachable}, lost)


def settle_missing(
    view: OffsetView, begin: Offsets, current: set[MessageQueue], live_before: set[str] | None = None
) -> tuple[Offsets, dict[MessageQueue, str], Offsets]:
    """Queues of `begin` that no route lists any more: their broker is not registered (wait for it,
    keeping the offsets), or their topic or the queues are gone (lost). Returns the offsets without
    the lost queues, the waiting queues with why, and the lost queues with their offsets.

    A broker counts as registered only when it was both before the routes were read (`live_before`)
    and after: one that came back (or went away) in between is not listed in routes read while it was
    away, and its queues are not lost."""
    missing = [q for q in begin if q not in current]
    if not missing:
        return begin, {}, {}
    live = view.live_brokers()
    if live_before is not None:
        live &= live_before
    waiting = {q: f"broker {q.broker_name} is not registered" for q in missing if q.broker_name not in live}
    for queue in waiting:
        log.warning("broker %s of %s is not registered; waiting for it", queue.broker_name, queue)
    lost = {q: begin[q] for q in missing if q not in waiting}
    return {q: o for q, o in begin.items() if q not in lost}, waiting, lost


def plan_batch(view: OffsetView, observed: Observed, rules: BatchRules) -> Plan:
    """The end offsets of the next micro-batch for what `observed` saw (see the module's rules);
    DataLossError when queues were lost or started over and `rules.fail_on_data_loss`."""
    begin, latest = observed.begin, observed.latest
    if observed.lost:
        _data_loss(
            "; ".join(f"{q.describe()} (the query is at offset {o})" for q, o in sorted(observed.lost.items()))
            + ": no route lists these queues any more (their topic was deleted or has fewer queues now)",
            rules.fail_on_data_loss,
            "go on without them",
        )
    ends = dict(begin)
    first_seen = [q for q in latest if q not in begin]
    placed = rules.place(first_seen) if first_seen else {}
    if placed:
        log.info("placing queues seen for the first time: %s", ", ".join(f"{q} at {o}" for q, o in placed.items()))
    ends.update(placed)  # they join the next batch from there
    moved_back = observed.moved_back
    restarted: Offsets = {}
    if moved_back:
        _data_loss(
            "; ".join(f"{q.describe()} ends at offset {latest[q]} but the query is at {begin[q]}" for q in moved_back)
            + ": the queues started over (a topic deleted and created again starts over at offset 0)",
            rules.fail_on_data_loss,
            "read them again from their first message",
        )
        restarted = view.min_offsets(moved_back)  # a queue whose broker did not answer keeps its offset
        ends.update(restarted)
    known = {q: begin[q] for q in latest if q in begin and q not in moved_back}
    available = {q: reachable_end(q, known[q], latest[q], rules.target) for q in known}
    if rules.max_rows is not None:
        available = limit_ends(known, available, rules.max_rows)
    ends.update(available)
    return Plan(ends, placed, restarted)


def reachable_end(queue: MessageQueue, begin: int, latest: int, target: Mapping[MessageQueue, int] | None) -> int:
    """How far a queue at `begin` with max offset `latest` (not below `begin`) may be read: to
    `latest`, or to its Trigger.AvailableNow target when that comes first, never backwards."""
    end = latest if target is None else min(latest, target.get(queue, latest))
    return max(begin, end)


def _data_loss(message: str, fail: bool, going_on: str) -> None:
    if fail:
        raise DataLossError(f"{message}; set failOnDataLoss=false to {going_on}")
    log.warning("%s; going on: %s (failOnDataLoss=false)", message, going_on)


@dataclass(frozen=True)
class RocketMQPartition(InputPartition):
    """What one Spark task reads: ranges of a contiguous block of the sorted queues, or one part
    of one queue's range (read in offset order either way)."""

    index: int
    ranges: tuple[QueueRange, ...]


@dataclass(frozen=True, slots=True)
class PartitionRules:
    """How a batch's ranges become Spark partitions (options numPartitions, minPartitions,
    maxRecordsPerPartition; see docs/spark.md, "Parallelism")."""

    num_partitions: int | None = None
    min_partitions: int | None = None
    max_records: int | None = None

    @property
    def splits(self) -> bool:
        return self.min_partitions is not None or self.max_records is not None


def plan_partitions(
    start: dict[MessageQueue, int], end: dict[MessageQueue, int], rules: PartitionRules
) -> list[RocketMQPartition]:
    """The Spark partitions of a read from `start` to `end`, a pure function of the two and `rules`.

    With minPartitions or maxRecordsPerPartition, every partition reads one part of one queue's
    range (`rocketspark.spark.source.splitting`). Otherwise whole queues are grouped: the sorted queues go
    to partitions as AllocateMessageQueueAveragely allocates queues to consumers (partition i of n
    reads what consumer i of n would get; n is numPartitions, at most the queue count), so a
    partition keeps its queues from batch to batch while the queue set stays the same. Partitions
    with nothing to read are not planned."""
    queues = sorted(end)
    if not queues:
        return []
    if rules.splits:
        whole = (QueueRange(q.topic, q.broker_name, q.queue_id, start.get(q, end[q]), end[q]) for q in queues)
        parts = split_ranges(whole, min_partitions=rules.min_partitions, max_records=rules.max_records)
        return [RocketMQPartition(index, (part,)) for index, part in enumerate(parts)]
    count = min(rules.num_partitions or len(queues), len(queues))
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
