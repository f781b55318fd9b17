"""A task attempt's half messages as offset ranges of the brokers' half queues, and back.

A broker stores every half message in queue 0 of RMQ_SYS_TRANS_HALF_TOPIC, whatever its topic, so a
task attempt's half messages on one broker lie between the first and the last half-queue offset the
broker acknowledged to it, among those of other tasks and producers. What a task reports to the
driver (and what a batch record keeps) is one `HalfRange` (record.py) a broker: the attempt, those two
offsets and how many of its half messages lie between, O(brokers) whatever the rows. Ranges of
batches of half messages are ended by range (ending.py). The driver reads the ranges of half messages
sent alone back (`resolve`) to get what ends each (its half-queue and commit log offsets, its real
topic and queue, its UNIQ_KEY), keeping the half messages of the attempt, each once (Apache
RocketMQ's check writes copies of an open half message back to the half queue under new offsets,
which may fall inside a range: the first one, the original, is kept), in the order of their rows
(SEQUENCE_PROPERTY). A range whose half messages are not all there any more (the broker deleted
the file, `fileReservedTime`) is data loss.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from rocketspark.client.api.pull import PullStatus
from rocketspark.client.consumer.puller import QueuePuller
from rocketspark.client.producer.transaction import AsyncTransactionProducer, HalfMessage
from rocketspark.errors import DataLossError
from rocketspark.message.properties import codec as props
from rocketspark.message.properties.columns import property_values
from rocketspark.message.validation import TRANS_HALF_TOPIC
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark.sink.transactional.record import ATTEMPT_PROPERTY, SEQUENCE_PROPERTY, HalfRange

#: half messages asked for in one pull of a range
PULL_MESSAGES = 10_000


async def resolve(
    producer: AsyncTransactionProducer, ranges: Sequence[HalfRange], timeout_ms: int | None = None
) -> list[list[HalfMessage]]:
    """The half messages of each range (of half messages sent alone), in the order of their rows;
    DataLossError when a range holds fewer than it should."""
    if producer.instance is None:
        raise RuntimeError("the transaction producer is not started")
    puller = QueuePuller(producer.instance, producer.group)
    timeout_s = (timeout_ms or producer.send_timeout_ms) / 1000
    resolved = []
    for span in ranges:
        queue = MessageQueue(TRANS_HALF_TOPIC, span.broker_name, 0)
        found: dict[str, tuple[int, HalfMessage]] = {}  # UNIQ_KEY -> (row, the first half message with it)
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
        resolved.append([half for _, half in sorted(found.values(), key=lambda item: item[0])])
    return resolved


def _collect(batch: pa.RecordBatch, span: HalfRange, found: dict[str, tuple[int, HalfMessage]]) -> None:
    attempts, uniq_keys, topics, queue_ids, rows = property_values(
        batch.column("properties"),
        ATTEMPT_PROPERTY,
        props.UNIQ_KEY,
        props.REAL_TOPIC,
        props.REAL_QUEUE_ID,
        SEQUENCE_PROPERTY,
    )
    keep = pc.fill_null(
        pc.and_(pc.equal(attempts, span.attempt), pc.less_equal(batch.column("queue_offset"), span.last)), False
    )
    if not pc.any(keep).as_py():
        return
    columns = zip(
        pc.filter(batch.column("queue_offset"), keep).to_pylist(),
        pc.filter(batch.column("commit_log_offset"), keep).to_pylist(),
        pc.filter(uniq_keys, keep).to_pylist(),
        pc.filter(topics, keep).to_pylist(),
        pc.filter(queue_ids, keep).to_pylist(),
        pc.filter(rows, keep).to_pylist(),
        strict=True,
    )
    for queue_offset, commit_log_offset, uniq_key, topic, queue_id, row in columns:
        if uniq_key not in found:  # a later one is a copy (Apache's check)
            half = HalfMessage(topic, span.broker_name, queue_offset, commit_log_offset, uniq_key, int(queue_id))
            # a half message of an earlier version carries no row number: its half-queue order is the rows'
            found[uniq_key] = (int(row) if row is not None else queue_offset, half)
