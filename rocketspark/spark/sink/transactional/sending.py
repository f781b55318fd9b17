"""Executor side of a transactional write: a task's rows sent as half messages.

Rows go to the queues the non-transactional sink would pick (:class:`rocketspark.spark.sink.writing.SplitRows`:
`queueId`, `shardingKey`, the row's id, else round robin), with the same ids, one half message per
row, in the rows' order per queue. Each carries its batch record's path and the task attempt's id
(:mod:`rocketspark.spark.sink.transactional.record`) and, unless `transactionMaxOpenSeconds` is 0, that
many seconds as CHECK_IMMUNITY_TIME_IN_SECONDS: a broker does not ask about it before (an open batch
has no answer yet but UNKNOWN, which Apache RocketMQ counts towards its transactionCheckMax).
No consumer sees them until the driver commits the batch. A task that fails rolls back the half
messages it knows it sent before the failure leaves it; one that succeeds reports where its half
messages are in the brokers' half queues (offset ranges, ranges.py), not each one.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from rocketspark.client.producer.transaction import AsyncTransactionProducer, HalfMessage, TransactionStatus
from rocketspark.errors import RocketMQError, ValidationError
from rocketspark.message.message import Message
from rocketspark.message.properties import codec as props
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark import cluster
from rocketspark.spark.sink.ids import IdScope
from rocketspark.spark.sink.options import SinkOptions
from rocketspark.spark.sink.rows import Outgoing
from rocketspark.spark.sink.transactional.ending import end_halves
from rocketspark.spark.sink.transactional.listener import using_producer
from rocketspark.spark.sink.transactional.ranges import ranges_of
from rocketspark.spark.sink.transactional.record import ATTEMPT_PROPERTY, RECORD_PROPERTY, HalfRange
from rocketspark.spark.sink.writing import SplitRows

log = logging.getLogger(__name__)

#: half messages in flight at once per task
HALVES_IN_FLIGHT = 32
#: how long a failed task waits for the rollback of what it sent
ROLLBACK_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class TaskHalves:
    """What one task attempt sent, its commit message: its id, its batch record's path, its rows and
    where its half messages are (one range a broker, ranges.py): O(brokers), whatever the rows."""

    attempt: str
    record_path: str
    rows: int
    ranges: tuple[HalfRange, ...]


def _messages(item: Outgoing, extra: dict[str, str]) -> list[tuple[Message, str | None]]:
    if item.delay_level:
        raise ValidationError("transactional writes cannot delay rows: the delayLevel column must be 0 or null")
    columns = item.batch.to_pydict()
    return [
        (Message(item.topic, body, tags=tags, keys=keys, properties={**dict(props or ()), **extra}), uniq)
        for body, tags, keys, uniq, props in zip(
            columns["body"], columns["tags"], columns["keys"], columns["uniq_key"], columns["properties"], strict=True
        )
    ]


async def _send(
    producer: AsyncTransactionProducer,
    outgoing: list[Outgoing],
    extra: dict[str, str],
    sent: list[HalfMessage],
    timeout_ms: int,
) -> None:
    """Send every row, each within `timeout_ms`; rows for one queue one after another, queues
    concurrently. `sent` gets each half message as it is acknowledged."""
    slots = asyncio.Semaphore(HALVES_IN_FLIGHT)
    chains: dict[MessageQueue | None, list[tuple[Message, str | None]]] = {}
    for item in outgoing:
        chains.setdefault(item.queue, []).extend(_messages(item, extra))

    async def one(message: Message, queue: MessageQueue | None, uniq: str | None) -> None:
        async with slots:
            _, half = await producer.send_half(message, queue=queue, uniq_key=uniq, timeout_ms=timeout_ms)
        sent.append(half)

    async def chain(queue: MessageQueue, rows: list[tuple[Message, str | None]]) -> None:
        for message, uniq in rows:
            await one(message, queue, uniq)

    tasks = []
    for queue, rows in chains.items():
        if queue is None:  # round robin: no order to keep
            tasks += [asyncio.ensure_future(one(message, None, uniq)) for message, uniq in rows]
        else:
            tasks.append(asyncio.ensure_future(chain(queue, rows)))
    try:
        await asyncio.gather(*tasks)
    finally:  # a failure: the others stop before the task reports it
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def send_task(
    options: SinkOptions,
    batches: Iterator[pa.RecordBatch],
    partition: int | None,
    ids: IdScope | None,
    record_path: str,
) -> TaskHalves:
    """Send a task's rows as half messages of a new task attempt; its halves, for the commit message."""
    attempt = uuid.uuid4().hex
    extra = {RECORD_PROPERTY: record_path, ATTEMPT_PROPERTY: attempt}
    if options.transaction_max_open_s:
        extra[props.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(options.transaction_max_open_s)
    sent: list[HalfMessage] = []
    with using_producer(options) as producer:
        split = SplitRows(options, partition, ids, producer)
        try:
            for batch in batches:
                outgoing = split.next(batch)
                if outgoing:
                    cluster.run(_send(producer, outgoing, extra, sent, options.send_timeout_ms), None)
        except BaseException:
            _roll_back(producer, sent, options.send_timeout_ms)
            raise
    return TaskHalves(attempt, record_path, split.rows, ranges_of(attempt, sent))


def _roll_back(producer: AsyncTransactionProducer, sent: list[HalfMessage], timeout_ms: int) -> None:
    """Best effort: what is not rolled back here the check rolls back once the batch commits."""
    try:
        cluster.run(end_halves(producer, sent, TransactionStatus.ROLLBACK, timeout_ms), ROLLBACK_TIMEOUT_S)
    except (RocketMQError, TimeoutError) as exc:
        log.warning("rolling back %d half messages of a failed task failed: %s", len(sent), exc)
