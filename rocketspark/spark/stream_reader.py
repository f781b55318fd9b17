"""`RocketMQStreamReader`: micro-batches over the queues of the subscribed topics.

Offsets live in Spark's checkpoint. The consumer group's offsets on the brokers mirror the query's
progress (next offset to consume, increase-only), so RocketMQ's tools show its lag: the offsets a
new query starts from, the end of every batch once the next one is planned (Spark commits a batch
one batch late and never the last one), and what `commit()` reports. A mirror a broker did not take
is tried again at the next one; the last one of a `Trigger.AvailableNow` run is retried until it is
taken or `pullTimeoutMs` passes.

A queue the query sees for the first time after it started gets its position from the starting
option as of the query's start: a queue of a broker that was away then is not replayed from its
earliest offset under `latest`, while a queue created since (scale-out) holds only messages stored
after the start and so is read from its earliest offset.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from rocketspark.errors import DataLossError, RocketMQError
from rocketspark.message.queue import MessageQueue
from rocketspark.spark import cluster
from rocketspark.spark import offsets as offset_dicts
from rocketspark.spark.options import Position, SourceOptions
from rocketspark.spark.planning import limit_ends, plan_partitions
from rocketspark.spark.positions import resolve
from rocketspark.spark.queue_view import QueueView
from rocketspark.spark.reading import read_partition

log = logging.getLogger(__name__)

#: pause between two looks at the cluster while waiting for a broker or a mirror
WAIT_STEP_S = 1.0


@dataclass(frozen=True, slots=True)
class Observed:
    """The queues as the driver sees them at the start of planning a micro-batch."""

    begin: dict[MessageQueue, int]  # where the previous batch ended, without queues lost for good
    latest: dict[MessageQueue, int]  # max offsets of the queues whose broker answered
    waiting: dict[MessageQueue, str]  # queues that cannot be read now, and why


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._initial: offset_dicts.OffsetDict | None = None
        self._started_at_ms: int | None = None  # when this run of the query started
        self._target: dict[MessageQueue, int] | None = None  # Trigger.AvailableNow's end
        self._latest: offset_dicts.OffsetDict | None = None
        self._mirrored: dict[MessageQueue, int] = {}  # what the brokers took
        self._topics: set[str] = set(options.topics)

    # -- driver ----------------------------------------------------------------------------------

    def _group(self) -> str:
        assert self.options.consumer_group is not None  # required for streams
        return self.options.consumer_group

    def _started(self) -> int:
        """When this run started, in ms: a new query's start, or a restarted one's first planning.

        (Spark keeps no source metadata of a Python source in the checkpoint, so a restarted query
        measures "as of the start" from its restart.)"""
        if self._started_at_ms is None:
            self._started_at_ms = int(time.time() * 1000)
        return self._started_at_ms

    def _queues(self, view: QueueView, *, must_exist: bool) -> list[MessageQueue]:
        """The queues to read now; the group is heartbeaten to their brokers."""
        queues = view.queues(must_exist=must_exist)
        self._topics.update(q.topic for q in queues)
        cluster.keep_group_alive(self.options, lambda: self._topics)
        return queues

    def initialOffset(self) -> dict[str, Any]:
        """Resolved once per query run and cached: Spark asks more than once. Queues whose broker does
        not answer now are left out and placed when first seen, as of this start."""
        if self._initial is None:
            self._started()
            view = QueueView(self.options)
            start = resolve(view, self._queues(view, must_exist=True), self.options.starting, self._group())
            if self.options.starting.position is Position.GROUP:
                self._mirrored = dict(start)
            else:  # a new checkpoint moves the group to where the query starts, backwards too
                self._mirrored = {}
                self._mirror(view, start)
            self._initial = offset_dicts.to_dict(start)
            log.info("query of group %s starts at %s", self._group(), self._initial)
        return self._initial

    def prepareForTriggerAvailableNow(self) -> None:
        view = QueueView(self.options)
        self._target = view.max_offsets(self._queues(view, must_exist=True))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_messages_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The queues' max offsets when the batch was planned: Spark shows them as the source's
        `latestOffset` in every `StreamingQueryProgress`, beside the batch's `endOffset`."""
        return self._latest

    def latestOffset(self, start: dict[Any, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch. `start` is where the previous one ended, and it has
        been processed: its offsets are mirrored to the group now.

        Queues that cannot be read now keep their offsets while the others go on; a
        Trigger.AvailableNow run that has nothing else left waits for them (`_wait_for_brokers`)."""
        self._started()
        begin = offset_dicts.from_dict(start)
        view = QueueView(self.options)
        self._mirror(view, begin)
        observed = self._observe(view, begin)
        ends = self._plan(view, observed, limit)
        if self._target is not None and ends == begin:  # an AvailableNow run would end with this answer
            if observed.waiting:
                view, observed = self._wait_for_brokers(begin, observed)
                ends = self._plan(view, observed, limit)
            if ends == begin:
                self._mirror_until_taken(begin)
        return offset_dicts.to_dict(ends)

    def _plan(self, view: QueueView, observed: Observed, limit: ReadLimit) -> dict[MessageQueue, int]:
        """The next batch's end offsets for what `observed` saw."""
        latest = observed.latest
        self._latest = offset_dicts.to_dict(latest)
        if self._target is not None:
            for queue, offset in latest.items():  # queues first seen during the run: what they hold now
                self._target.setdefault(queue, offset)
        ends = dict(observed.begin)
        first_seen = [q for q in latest if q not in observed.begin]
        if first_seen:
            starting, group = self.options.starting, self._group()
            placed = resolve(view, first_seen, starting, group, latest_as_of_ms=self._started())
            log.info("placing queues seen for the first time: %s", ", ".join(f"{q} at {o}" for q, o in placed.items()))
            ends.update(placed)  # they join the next batch from there
        known = {q: observed.begin[q] for q in latest if q in observed.begin}
        available = {q: max(known[q], self._reachable_end(q, known[q], latest[q])) for q in known}
        if isinstance(limit, ReadMaxRows):
            available = limit_ends(known, available, limit.max_rows)
        ends.update(available)
        return ends

    def _observe(self, view: QueueView, begin: dict[MessageQueue, int]) -> Observed:
        queues = self._queues(view, must_exist=False)
        kept, away = self._settle_missing(view, begin, set(queues))
        latest = view.max_offsets(queues)
        return Observed(kept, latest, {**away, **view.unreachable})

    def _wait_for_brokers(self, begin: dict[MessageQueue, int], observed: Observed) -> tuple[QueueView, Observed]:
        """Trigger.AvailableNow must not end as if complete with a broker's messages unread: wait for
        the brokers of the waiting queues for up to pullTimeoutMs, then fail naming them."""
        deadline = time.monotonic() + self.options.pull_timeout_ms / 1000
        while True:
            brokers = sorted({q.broker_name for q in observed.waiting})
            if time.monotonic() >= deadline:
                details = "; ".join(f"{q.describe()}: {why}" for q, why in sorted(observed.waiting.items()))
                raise RocketMQError(
                    f"Trigger.AvailableNow cannot read everything available: broker(s) {', '.join(brokers)} "
                    f"could not be reached for {self.options.pull_timeout_ms} ms (pullTimeoutMs), "
                    f"so these queues are unread: {details}"
                )
            log.warning("waiting for broker(s) %s before the AvailableNow run can go on", ", ".join(brokers))
            time.sleep(WAIT_STEP_S)
            view = QueueView(self.options)
            observed = self._observe(view, begin)
            if not observed.waiting:
                return view, observed

    def _reachable_end(self, queue: MessageQueue, begin: int, latest: int) -> int:
        if latest < begin:
            message = (
                f"{queue.describe()} holds offsets up to {latest - 1}, but the query is at {begin}: "
                "its messages were removed (a topic deleted and created again starts over at offset 0)"
            )
            if self.options.fail_on_data_loss:
                raise DataLossError(message + "; set failOnDataLoss=false to continue from its end")
            log.warning("%s; continuing from its end (failOnDataLoss=false)", message)
            return latest
        if self._target is not None:
            return min(latest, self._target.get(queue, begin))
        return latest

    def _settle_missing(
        self, view: QueueView, begin: dict[MessageQueue, int], current: set[MessageQueue]
    ) -> tuple[dict[MessageQueue, int], dict[MessageQueue, str]]:
        """Queues of `begin` that no route lists any more: their broker is down (wait, keeping the
        offsets), or the topic or its queues are gone (data loss)."""
        missing = [q for q in begin if q not in current]
        if not missing:
            return begin, {}
        live = view.live_brokers()
        waiting = {q: f"broker {q.broker_name} is not registered" for q in missing if q.broker_name not in live}
        for queue in waiting:
            log.warning("broker %s of %s is not registered; waiting for it", queue.broker_name, queue)
        lost = [q for q in missing if q not in waiting]
        if lost:
            message = "; ".join(f"{q.describe()} (the query is at offset {begin[q]})" for q in lost)
            message += ": no route lists these queues any more (their topic was deleted or has fewer queues now)"
            if self.options.fail_on_data_loss:
                raise DataLossError(message + "; set failOnDataLoss=false to go on without them")
            log.warning("%s; going on without them (failOnDataLoss=false)", message)
        return {q: o for q, o in begin.items() if q not in lost}, waiting

    def _mirror(self, view: QueueView, offsets: dict[MessageQueue, int]) -> dict[MessageQueue, int]:
        """Mirror processed offsets to the group (increase-only, as RemoteBrokerOffsetStore);
        returns those no broker took yet (they are tried again next time)."""
        pending = {q: o for q, o in offsets.items() if o > self._mirrored.get(q, -1)}
        if not pending:
            return {}
        taken = view.commit_group_offsets(self._group(), pending)
        self._mirrored.update({q: pending[q] for q in taken})
        return {q: o for q, o in pending.items() if q not in taken}

    def _mirror_until_taken(self, offsets: dict[MessageQueue, int]) -> None:
        """The last mirror of an AvailableNow run (no later batch would retry it)."""
        deadline = time.monotonic() + self.options.pull_timeout_ms / 1000
        while left := self._mirror(QueueView(self.options), offsets):
            if time.monotonic() >= deadline:
                log.error(
                    "the group %s's offsets of %s could not be updated for %d ms (pullTimeoutMs); RocketMQ's tools "
                    "show more lag there than the query has (its checkpoint holds its position)",
                    self._group(),
                    ", ".join(map(str, left)),
                    self.options.pull_timeout_ms,
                )
                return
            time.sleep(WAIT_STEP_S)

    def commit(self, end: dict[Any, Any]) -> None:
        self._mirror(QueueView(self.options), offset_dicts.from_dict(end))

    def partitions(self, start: dict[Any, Any], end: dict[Any, Any]) -> Sequence[InputPartition]:
        return plan_partitions(offset_dicts.from_dict(start), offset_dicts.from_dict(end), self.options.num_partitions)

    # -- executors -------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)
