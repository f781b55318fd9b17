"""Executor side of a transactional write: a task's rows sent as half messages.

Rows go to the queues the non-transactional sink would pick (:class:`rocketspark.spark.sink.writing.SplitRows`:
`queueId`, `shardingKey`, the row's id, else round robin), with the same ids, in the rows' order per
queue. Each carries its batch record's path and the task attempt's id
(:mod:`rocketspark.spark.sink.transactional.record`) and, unless `transactionMaxOpenSeconds` is 0, that
many seconds as CHECK_IMMUNITY_TIME_IN_SECONDS: a broker does not ask about it before (an open batch
has no answer yet but UNKNOWN, which Apache RocketMQ counts towards its transactionCheckMax). The
half messages name the driver's group (`producerGroup`) as theirs (PGROUP), so the brokers ask the
driver's producers about them, never an executor's (listener.py).

To a bundled broker the rows go as the plain sink's do, Arrow batches per queue, one after another
per queue (:class:`rocketspark.spark.sink.writing.SendPipeline`), but as batches of half messages of
the attempt's transaction (ARROW_SEND_HALF_MESSAGE, docs/protocol.md), which the driver ends by
range. A broker without that extension (Apache RocketMQ, which takes no transactional message in a
batch) gets one half message per row, many in flight at once, each numbered with its row's place
(SEQUENCE_PROPERTY) since overlapping sends may be stored out of order: the driver ends them in that
order. No consumer sees any of them until the driver commits the batch. A task that fails rolls back
the half messages it knows it sent before the failure leaves it; one that succeeds reports where its
half messages are in the brokers' half queues (offset ranges, ranges.py), not each one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import uuid
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass

import pyarrow as pa

from rocketspark.client.api.send import SendResult
from rocketspark.client.producer.transaction import AsyncTransactionProducer, HalfMessage, TransactionStatus
from rocketspark.client.sync import shared_loop
from rocketspark.errors import RocketMQError, ValidationError
from rocketspark.message.message import Message
from rocketspark.message.properties import codec as props
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark import cluster
from rocketspark.spark.sink.ids import IdScope
from rocketspark.spark.sink.options import SinkOptions
from rocketspark.spark.sink.rows import Outgoing
from rocketspark.spark.sink.transactional.ending import end_halves, end_ranges
from rocketspark.spark.sink.transactional.listener import using_task_producer
from rocketspark.spark.sink.transactional.record import (
    ATTEMPT_PROPERTY,
    RECORD_PROPERTY,
    SEQUENCE_PROPERTY,
    HalfRange,
)
from rocketspark.spark.sink.writing import BATCHES_IN_FLIGHT, SendPipeline, SplitRows

log = logging.getLogger(__name__)

#: half messages sent alone in flight at once per task (to brokers without batches of them)
HALVES_IN_FLIGHT = 64
#: how long a failed task waits for the rollback of what it sent
ROLLBACK_TIMEOUT_S = 30.0
#: the process's turns over a topic's queues for rows without a chosen queue (a task's batches go to
#: the next queue each, and the tasks of a process, and the processes, start apart)
_TURNS = itertools.count(random.randrange(1 << 16))


@dataclass(frozen=True)
class TaskHalves:
    """What one task attempt sent, its commit message: its id, its batch record's path, its rows and
    where its half messages are (one range a broker, ranges.py): O(brokers), whatever the rows."""

    attempt: str
    record_path: str
    rows: int
    ranges: tuple[HalfRange, ...]


@dataclass(frozen=True, slots=True)
class _Numbered(Outgoing):
    """A producer batch and the place of its first row among the attempt's rows."""

    first_row: int = 0


class _HalfSender:
    """The half messages of one task attempt, on the process's event loop: batches to brokers that
    take them, single ones to the others; what each broker acknowledged."""

    def __init__(self, producer: AsyncTransactionProducer, options: SinkOptions, attempt: str, extra: dict[str, str]):
        self.producer = producer
        self.options = options
        self.attempt = attempt
        self.extra = extra
        self.pipeline = SendPipeline(producer, options, send=self._send)
        self.batches: list[SendResult] = []  # acknowledged batches of half messages
        self.singles: list[HalfMessage] = []  # acknowledged single half messages
        self._slots: asyncio.Semaphore | None = None

    async def _send(self, item: Outgoing) -> list[SendResult]:
        assert isinstance(item, _Numbered)
        queue = item.queue or await self._round_robin(item.topic)
        broker = queue.broker_name
        if self.producer.serves_half_batches(broker):
            result = await self.producer.send_half_batch(
                item.batch,
                queue,
                transaction_id=self.attempt,
                properties=self.extra,
                timeout_ms=self.options.send_timeout_ms,
            )
            if result is not None:
                self.batches.append(result)
                return [result]
        if any(result.message_queue.broker_name == broker for result in self.batches):
            raise RocketMQError(
                f"broker {broker} stopped taking batches of half messages during the task (restarted with "
                "arrowEnable=false?): the task fails, and its next attempt sends them one by one"
            )
        await self._send_singles(item, queue)
        return []

    async def _round_robin(self, topic: str) -> MessageQueue:
        queues = await self.producer.fetch_publish_queues(topic)
        return queues[next(_TURNS) % len(queues)]

    async def _send_singles(self, item: _Numbered, queue: MessageQueue) -> None:
        """The item's rows one by one, many at once (each numbered, so the driver ends them in order)."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(HALVES_IN_FLIGHT)
        slots = self._slots

        async def one(message: Message, uniq: str | None) -> None:
            async with slots:
                _, half = await self.producer.send_half(
                    message, queue=queue, uniq_key=uniq, timeout_ms=self.options.send_timeout_ms
                )
            self.singles.append(half)

        sends = [asyncio.ensure_future(one(message, uniq)) for message, uniq in _messages(item, self.extra)]
        try:
            await asyncio.gather(*sends)
        finally:  # a failure: the others stop before the task reports it
            for send in sends:
                send.cancel()
            await asyncio.gather(*sends, return_exceptions=True)

    def ranges(self) -> tuple[HalfRange, ...]:
        """Where the acknowledged half messages lie: one range a broker."""
        spans: dict[tuple[str, bool], tuple[int, int, int]] = {}
        found = [(r.message_queue.broker_name, True, r.queue_offset, r.count) for r in self.batches]
        found += [(h.broker_name, False, h.queue_offset, 1) for h in self.singles]
        for broker, batched, first, count in found:
            low, high, total = spans.get((broker, batched), (first, first + count - 1, 0))
            spans[(broker, batched)] = (min(low, first), max(high, first + count - 1), total + count)
        return tuple(
            HalfRange(self.attempt, broker, *span, batched) for (broker, batched), span in sorted(spans.items())
        )

    async def roll_back(self) -> None:
        """Roll back what the brokers acknowledged (best effort: the check rolls back the rest once
        the batch committed)."""
        await self.pipeline.cancel()
        timeout_ms = self.options.send_timeout_ms
        await end_ranges(self.producer, [r for r in self.ranges() if r.batched], TransactionStatus.ROLLBACK, timeout_ms)
        await end_halves(self.producer, [self.singles], TransactionStatus.ROLLBACK, timeout_ms)


def _messages(item: _Numbered, extra: dict[str, str]) -> list[tuple[Message, str | None]]:
    columns = item.batch.to_pydict()
    rows = zip(
        columns["body"], columns["tags"], columns["keys"], columns["uniq_key"], columns["properties"], strict=True
    )
    return [
        (
            Message(
                item.topic,
                body,
                tags=tags,
                keys=keys,
                properties={**dict(properties or ()), **extra, SEQUENCE_PROPERTY: str(item.first_row + index)},
            ),
            uniq,
        )
        for index, (body, tags, keys, uniq, properties) in enumerate(rows)
    ]


def _numbered(outgoing: list[Outgoing], first_row: int) -> list[Outgoing]:
    """The producer batches, each with the place of its first row (rows keep their order per queue)."""
    numbered: list[Outgoing] = []
    for item in outgoing:
        if item.delay_level:
            raise ValidationError("transactional writes cannot delay rows: the delayLevel column must be 0 or null")
        numbered.append(_Numbered(item.topic, item.queue, item.batch, 0, first_row))
        first_row += item.batch.num_rows
    return numbered


def _settle(in_flight: set[Future[list[SendResult]]], keep: int) -> None:
    """Wait until at most `keep` Spark batches' sends are in flight; raises a send's failure."""
    while True:
        for future in [f for f in in_flight if f.done()]:
            in_flight.discard(future)
            future.result()
        if len(in_flight) <= keep:
            return
        wait(in_flight, return_when=FIRST_COMPLETED)


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
    with using_task_producer(options) as producer:
        sender = _HalfSender(producer, options, attempt, extra)
        split = SplitRows(options, partition, ids, producer)
        in_flight: set[Future[list[SendResult]]] = set()
        try:
            for batch in batches:
                first_row = split.rows
                outgoing = _numbered(split.next(batch), first_row)
                if outgoing:
                    in_flight.add(asyncio.run_coroutine_threadsafe(sender.pipeline.send(outgoing), shared_loop().loop))
                    _settle(in_flight, BATCHES_IN_FLIGHT)
            _settle(in_flight, 0)
        except BaseException:
            for future in in_flight:
                future.cancel()
            _roll_back(sender)
            raise
    return TaskHalves(attempt, record_path, split.rows, sender.ranges())


def _roll_back(sender: _HalfSender) -> None:
    try:
        cluster.run(sender.roll_back(), ROLLBACK_TIMEOUT_S)
    except (RocketMQError, TimeoutError) as exc:
        rows = sum(span.count for span in sender.ranges())
        log.warning("rolling back %d half messages of a failed task failed: %s", rows, exc)
