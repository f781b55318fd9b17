"""A task attempt's half messages as offset ranges of the brokers' half queues, and back.

A broker stores every half message in queue 0 of RMQ_SYS_TRANS_HALF_TOPIC, whatever its topic, so a
task attempt's half messages on one broker lie between the first and the last half-queue offset the
broker acknowledged to it, among those of other tasks and producers. What a task reports to the
driver (and what a batch record keeps) is one `HalfRange` (record.py) a broker: the attempt, those two offsets
and how many of its half messages lie between, O(brokers) whatever the rows. The driver reads the
ranges back (`resolve`) to get what ends each half message (its half-queue and commit log offsets,
its real topic and queue, its UNIQ_KEY), keeping the half messages of the attempt, each once: Apache
RocketMQ's check writes copies of an open half message back to the half queue under new offsets,
which may fall inside a range, and the first one, the original, is kept. A range whose half messages
are not all there any more (the broker deleted the file, `fileReservedTime`) is data loss.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from rocketspark.client.api.pull import PullStatus
from rocketspark.client.consumer.puller import QueuePuller
from rocketspark.client.producer.transaction import AsyncTransactionProducer, HalfMessage
from rocketspark.errors import DataLossError
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import TRANS_HALF_TOPIC
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark.sink.transactional.record import ATTEMPT_PROPERTY, HalfRange

#: half messages asked for in one pull of a range
PULL_MESSAGES = 10_000


def ranges_of(attempt: str, halves: Iterable[HalfMessage]) -> tuple[HalfRange, ...]:
    """The ranges of an attempt's half messages, one a broker."""
    spans: dict[str, tuple[int, int, int]] = {}
    for half in halves:
        first, last, count = spans.get(half.broker_name, (half.queue_offset, half.queue_offset, 0))
        spans[half.broker_name] = (min(first, half.queue_offset), max(last, half.queue_offset), count + 1)
    return tuple(HalfRange(attempt, broker, *span) for broker, span in sorted(spans.items()))


async def resolve(
    producer: AsyncTransactionProducer, ranges: Sequence[HalfRange], timeout_ms: int | None = None
) -> list[HalfMessage]:
    """The half messages of the ranges, in their half-queue order per range (so each real queue's
    rows in the order they were sent); DataLossError when a range holds fewer than it should."""
    if producer.instance is None:
        raise RuntimeError("the transaction producer is not started")
    puller = QueuePuller(producer.instance, producer.group)
    timeout_s = (timeout_ms or producer.send_timeout_ms) / 1000
    halves: list[HalfMessage] = []
    for span in ranges:
        queue = MessageQueue(TRANS_HALF_TOPIC, span.broker_name, 0)
        found: dict[str, HalfMessage] = {}  # UNIQ_KEY -> the first half message with it
        offset = span.first
        while offset <= span.last:
            count = min(PULL_MESSAGES, span.last + 1 - offset)
            pulled = await puller.pull_batch(queue, offset, max_messages=count, timeout_s=timeout_s)
            if pulled.status is not PullStatus.FOUND or pulled.next_begin_offset <= offset:
                break
            for batch in pulled.batches:
                _collect(batch, span, found)
            offset = pulled.next_begin_offset
        if len(found) != span.count:
            raise DataLossError(
                f"the half queue of broker {span.broker_name} holds {len(found)} of the {span.count} half "
                f"messages task attempt {span.attempt} stored at offsets {span.first}..{span.last}: the "
                "broker no longer has them (fileReservedTime), so this batch cannot be committed"
            )
        halves.extend(found.values())
    return halves


def _collect(batch: pa.RecordBatch, span: HalfRange, found: dict[str, HalfMessage]) -> None:
    mark = f"{ATTEMPT_PROPERTY}{props.NAME_VALUE_SEPARATOR}{span.attempt}{props.PROPERTY_SEPARATOR}"
    offsets = batch.column("queue_offset")
    keep = pc.and_(pc.match_substring(batch.column("properties"), mark), pc.less_equal(offsets, span.last))
    rows = batch.filter(keep)
    for queue_offset, commit_log_offset, text in zip(
        rows.column("queue_offset").to_pylist(),
        rows.column("commit_log_offset").to_pylist(),
        rows.column("properties").to_pylist(),
        strict=True,
    ):
        properties = props.decode_properties(text)
        if properties.get(ATTEMPT_PROPERTY) != span.attempt:
            continue
        uniq_key = properties[props.UNIQ_KEY]
        if uniq_key not in found:
            topic, queue_id = properties[props.REAL_TOPIC], int(properties[props.REAL_QUEUE_ID])
            found[uniq_key] = HalfMessage(topic, span.broker_name, queue_offset, commit_log_offset, uniq_key, queue_id)
