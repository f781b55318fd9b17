"""`RocketMQStreamReader`: micro-batches over the queues of the subscribed topics.

Offsets live in Spark's checkpoint. The consumer group's offsets on the brokers mirror the query's
progress (next offset to consume, increase-only), so RocketMQ's tools show its lag: the offsets a
new query starts from, the end of every batch once the next one is planned (Spark commits a batch
one batch late and never the last one), and what `commit()` reports.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from rocketspark.errors import DataLossError
from rocketspark.message.queue import MessageQueue
from rocketspark.spark import cluster
from rocketspark.spark import offsets as offset_dicts
from rocketspark.spark.options import Position, SourceOptions
from rocketspark.spark.planning import RocketMQPartition, limit_ends, plan_partitions
from rocketspark.spark.positions import resolve
from rocketspark.spark.reading import read_partition

log = logging.getLogger(__name__)


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._initial: offset_dicts.OffsetDict | None = None
        self._target: dict[MessageQueue, int] | None = None  # Trigger.AvailableNow's end
        self._latest: offset_dicts.OffsetDict | None = None
        self._mirrored: dict[MessageQueue, int] = {}
        self._topics: set[str] = set(options.topics)

    # -- driver ----------------------------------------------------------------------------------

    def _group(self) -> str:
        assert self.options.consumer_group is not None  # required for streams
        return self.options.consumer_group

    def _queues(self, view: cluster.QueueView, *, must_exist: bool) -> list[MessageQueue]:
        """The queues to read now; the group is heartbeaten to their brokers."""
        queues = view.queues(must_exist=must_exist)
        self._topics.update(q.topic for q in queues)
        cluster.keep_group_alive(self.options, lambda: self._topics)
        return queues

    def initialOffset(self) -> dict[str, Any]:
        """Resolved once per query run and cached: Spark asks more than once."""
        if self._initial is None:
            view = cluster.QueueView(self.options)
            queues = self._queues(view, must_exist=True)
            start = resolve(view, queues, self.options.starting, self._group())
            if self.options.starting.position is not Position.GROUP:
                # a new checkpoint moves the group to where the query starts, backwards too
                view.commit_group_offsets(self._group(), start)
            self._mirrored = dict(start)
            self._initial = offset_dicts.to_dict(start)
            log.info("query of group %s starts at %s", self._group(), self._initial)
        return self._initial

    def prepareForTriggerAvailableNow(self) -> None:
        view = cluster.QueueView(self.options)
        self._target = view.max_offsets(self._queues(view, must_exist=True))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_messages_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest

    def latestOffset(self, start: dict[Any, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch. `start` is where the previous one ended, and it has
        been processed: its offsets are mirrored to the group now."""
        view = cluster.QueueView(self.options)
        begin = offset_dicts.from_dict(start)
        self._mirror(view, begin)
        queues = self._queues(view, must_exist=False)
        begin, waiting = self._settle_missing(view, begin, set(queues))
        reachable = [q for q in queues if q not in waiting]
        latest = view.max_offsets(reachable)
        self._latest = offset_dicts.to_dict(latest)
        new = [q for q in reachable if q not in begin]
        if new:
            log.info("reading new queues from their earliest offsets: %s", ", ".join(map(str, new)))
        ends = dict(begin)
        ends.update(view.min_offsets(new))  # new queues join the next batch from their earliest offset
        known = {q: begin[q] for q in reachable if q in begin}
        available = {q: max(known[q], self._reachable_end(q, known[q], latest[q])) for q in known}
        if isinstance(limit, ReadMaxRows):
            available = limit_ends(known, available, limit.max_rows)
        ends.update(available)
        return offset_dicts.to_dict(ends)

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
        self, view: cluster.QueueView, begin: dict[MessageQueue, int], current: set[MessageQueue]
    ) -> tuple[dict[MessageQueue, int], set[MessageQueue]]:
        """Queues of `begin` that no route lists any more: their broker is down (wait, keeping the
        offsets), or the topic or its queues are gone (data loss)."""
        missing = [q for q in begin if q not in current]
        if not missing:
            return begin, set()
        live = view.live_brokers()
        waiting = {q for q in missing if q.broker_name not in live}
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

    def _mirror(self, view: cluster.QueueView, offsets: dict[MessageQueue, int]) -> None:
        """Mirror processed offsets to the group (increase-only, as RemoteBrokerOffsetStore)."""
        advanced = {q: o for q, o in offsets.items() if o > self._mirrored.get(q, -1)}
        if advanced:
            view.commit_group_offsets(self._group(), advanced)
            self._mirrored.update(advanced)

    def commit(self, end: dict[Any, Any]) -> None:
        self._mirror(cluster.QueueView(self.options), offset_dicts.from_dict(end))

    def partitions(self, start: dict[Any, Any], end: dict[Any, Any]) -> Sequence[InputPartition]:
        return plan_partitions(offset_dicts.from_dict(start), offset_dicts.from_dict(end), self.options.num_partitions)

    # -- executors -------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RocketMQPartition)
        return read_partition(self.options, partition)
