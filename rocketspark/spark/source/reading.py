"""Reading a planned partition on an executor: pull each queue range as Arrow batches.

One client per Python worker (see :mod:`rocketspark.spark.cluster`) serves every task; pulls use the
Arrow pull and fall back to decoding standard records per batch with other brokers. Batches are
converted to the Spark schema with Arrow kernels and yielded one pull at a time, so memory stays
bounded whatever the backlog. The next pull of a range is on its way while Spark takes a batch (one
pull ahead): the broker prepares it meanwhile (for a standard broker, encodes its records).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import Future

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from rocketspark.client.api.pull import PullStatus
from rocketspark.client.consumer.puller import PulledBatch, QueuePuller
from rocketspark.client.lifecycle import ServiceState
from rocketspark.errors import DataLossError, RocketMQError
from rocketspark.message.batches.spark import to_spark_batch
from rocketspark.spark import cluster
from rocketspark.spark.options import SourceOptions
from rocketspark.spark.process_cache import ProcessCache
from rocketspark.spark.source.planning import RocketMQPartition
from rocketspark.spark.source.query_mark import mark_query
from rocketspark.spark.source.splitting import QueueRange

log = logging.getLogger(__name__)

#: the group name pulls carry when a batch read names no consumer group (pulls never commit)
DEFAULT_READER_GROUP = "rocketspark_spark_reader"
RETRY_DELAY_S = 0.5

_pullers: ProcessCache[tuple[object, ...], QueuePuller] = ProcessCache(
    alive=lambda puller: puller.instance.state is ServiceState.RUNNING
)


def puller_for(options: SourceOptions) -> QueuePuller:
    """This process's puller for the source's name servers and group, shared by its tasks."""
    group = options.consumer_group or DEFAULT_READER_GROUP
    key = (*cluster.connection_of(options), group)
    return _pullers.get(key, lambda: QueuePuller(cluster.source_instance(options), group))


def read_partition(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """The messages of a planned partition. When the plan has no partition (nothing to read), Spark
    still runs one task with a partition of its own: it reads nothing."""
    if not isinstance(partition, RocketMQPartition):
        return
    mark_query(options)  # which query reads as the group, for admin tools (query_mark)
    puller = puller_for(options)
    for queue_range in partition.ranges:
        yield from read_range(puller, options, queue_range)


def read_range(puller: QueuePuller, options: SourceOptions, queue_range: QueueRange) -> Iterator[pa.RecordBatch]:
    """Messages [start, end) of one queue, as Spark batches.

    Exactly the (matching) messages of [start, end): never one at or past `end`, so a micro-batch
    and its replay hold the same rows. A broker that cannot be reached, or a queue whose messages
    are not there yet, is retried until `pullTimeoutMs` passes without progress; messages that are
    gone for good are data loss.
    """
    queue = queue_range.queue
    offset = queue_range.start
    stalled_since: float | None = None
    timeout_s = options.pull_timeout_ms / 1000 + cluster.QUERY_TIMEOUT_S

    def pull(at: int) -> Future[PulledBatch]:
        size = min(options.pull_batch_size, queue_range.end - at)
        return cluster.submit(puller.pull_batch(queue, at, max_messages=size, expression=options.tags))

    ahead: Future[PulledBatch] | None = None
    try:
        while offset < queue_range.end:
            current, ahead = (ahead if ahead is not None else pull(offset)), None
            try:
                pulled = current.result(timeout_s)
            except RocketMQError as exc:
                if not exc.retriable:
                    raise
                stalled_since = _stall(stalled_since, options, queue_range, offset, str(exc))
                _refresh_route(puller, queue_range.topic)  # a restarted broker may listen elsewhere now
                continue
            finally:
                current.cancel()  # when it timed out
            if pulled.status is PullStatus.FOUND:  # its batches may all be filtered out by tags
                stalled_since = None
                offset = pulled.next_begin_offset
                if offset < queue_range.end:
                    ahead = pull(offset)
                for batch in pulled.batches:
                    kept = within(batch, queue_range.end)
                    if kept.num_rows:
                        yield to_spark_batch(kept, queue.broker_name)
            elif pulled.status is PullStatus.NO_MATCHED_MSG:
                stalled_since = None
                offset = pulled.next_begin_offset  # only messages the tag filter drops
            elif pulled.status is PullStatus.OFFSET_ILLEGAL:
                offset = _lost(
                    options, queue_range, offset, pulled.min_offset, pulled.max_offset, pulled.next_begin_offset
                )
            else:  # NO_NEW_MSG before the planned end: the broker does not have them (yet)
                if pulled.max_offset < queue_range.end and pulled.max_offset <= offset and stalled_since is None:
                    log.warning("%s holds offsets up to %d; waiting for %d", queue, pulled.max_offset, queue_range.end)
                stalled_since = _stall(stalled_since, options, queue_range, offset, f"max offset {pulled.max_offset}")
    finally:
        if ahead is not None:  # Spark stopped taking batches
            ahead.cancel()


def within(batch: pa.RecordBatch, end: int) -> pa.RecordBatch:
    """The rows of a pulled batch before `end`. A tag filter makes the broker count only matching
    messages, so it scans, and answers, past the planned end of the range."""
    offsets = batch.column("queue_offset")
    if not len(offsets) or offsets[-1].as_py() < end:
        return batch
    return batch.filter(pc.less(offsets, end))


def _refresh_route(puller: QueuePuller, topic: str) -> None:
    try:
        cluster.run(puller.instance.fetch_route(topic))
    except RocketMQError as exc:
        log.warning("refreshing the route of %s failed: %s", topic, exc)


def _stall(since: float | None, options: SourceOptions, queue_range: QueueRange, offset: int, why: str) -> float:
    now = time.monotonic()
    since = now if since is None else since
    if now - since > options.pull_timeout_ms / 1000:
        raise RocketMQError(
            f"could not read {queue_range.queue} at offset {offset} (range {queue_range.start}..{queue_range.end}) "
            f"for {options.pull_timeout_ms} ms (pullTimeoutMs): {why}"
        )
    time.sleep(RETRY_DELAY_S)
    return since


def _lost(options: SourceOptions, queue_range: QueueRange, offset: int, low: int, high: int, next_offset: int) -> int:
    """Where to go on when the broker no longer has `offset`; raises when failOnDataLoss."""
    last_lost = min(low, queue_range.end) - 1 if low > offset else queue_range.end - 1
    message = (
        f"messages of {queue_range.queue.describe()} at offsets {offset}..{last_lost} are gone: "
        f"the queue now holds {low}..{high - 1} (retention or a deleted topic)"
    )
    if options.fail_on_data_loss:
        raise DataLossError(message + "; set failOnDataLoss=false to skip them")
    log.warning("%s; skipping them (failOnDataLoss=false)", message)
    return next_offset if next_offset > offset else queue_range.end
