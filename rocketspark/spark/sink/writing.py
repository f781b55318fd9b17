"""Writing a task's rows on an executor: producer batches sent through one producer per process.

Spark hands a task Arrow batches; each becomes producer batches for one destination each
(:mod:`rocketspark.spark.sink.rows`), sent while the next batch is converted. Sends to one queue go
one after another in the order of the rows (rows of one sharding key stay in order); the others go
concurrently. A task returns only when every send is acknowledged, so Spark counts a task done only
when the brokers hold its rows; a send that fails after the producer's retries fails the task, and
Spark runs it again. With deterministic ids (:mod:`rocketspark.spark.sink.ids`) the retry sends the
same ids to the same queues, which brokers that detect duplicates store once.

A task fails as soon as one of its sends fails (or its input, or the conversion of a batch), and
before the failure leaves `write_partition` every send still in flight is cancelled and has ended:
a failed task leaves nothing running that could reach a broker after Spark was told it failed (a
request already written to a broker's connection may still be stored).

The producer holds fixed queues (`hold_fixed_queues`): a send to a queue chosen by id, `queueId` or
`shardingKey` that fails is tried again on that queue, after a backoff, until `sendTimeoutMs`; it is
never moved to another broker, whose duplicate window would not know the first copy. A broker away
for longer fails the task.

One producer per process serves every query writing with the same name servers, group,
credentials and TLS settings (what its client instance is keyed on, and a group is registered once
per instance); each send carries its query's `sendTimeoutMs` and `retries`. The producer is started
on first use and closed once no task used it for `cluster.PRODUCER_IDLE_S` (10 minutes; a task holds
it in use while it writes): Spark reuses Python workers across queries, and a finished query's
producer does not stay. Spark ends workers with `os._exit`, so nothing here relies on an exit hook;
the brokers expire producers that stop heartbeating, as RocketMQ's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from rocketspark.aio import finish_or_cancel
from rocketspark.client.api.send import SendResult
from rocketspark.client.producer.producer import AsyncProducer
from rocketspark.client.sync import shared_loop
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark import cluster
from rocketspark.spark.process_cache import ProcessCache
from rocketspark.spark.sink.ids import IdScope
from rocketspark.spark.sink.options import SinkOptions
from rocketspark.spark.sink.rows import Outgoing, RowPlace, split_batch

log = logging.getLogger(__name__)

#: Spark batches whose sends may be in flight while the next one is converted
BATCHES_IN_FLIGHT = 4
#: producer requests in flight at once per task: two overlap one request's encoding with the broker
#: storing the other. More only queue up at the broker, which answers SYSTEM_BUSY to sends that waited
#: there over 200 ms (waitTimeMillsInSendQueue); at 8 a 2-core machine's writes failed on it (bench/RESULTS.md)
REQUESTS_IN_FLIGHT = 2

#: (topic, broker name, queue id) -> (messages, first queue offset, last queue offset)
QueueTally = dict[tuple[str, str, int], tuple[int, int, int]]

_producers: ProcessCache[tuple[object, ...], AsyncProducer] = ProcessCache(
    alive=lambda producer: producer.running, close=cluster.close_producer, idle_s=cluster.PRODUCER_IDLE_S
)


def producer_key(options: SinkOptions) -> tuple[object, ...]:
    """What tells one process producer from another: its client instance's keys (name servers,
    credentials, TLS) and its group; not the send settings, which go with each send."""
    return (options.namesrv_addr, options.producer_group, options.credentials, options.use_tls, options.tls_trust)


def _start(options: SinkOptions) -> AsyncProducer:
    producer = AsyncProducer(
        options.producer_group,
        namesrv_addr=options.namesrv_addr,
        hold_fixed_queues=True,
        credentials=options.credentials,
        use_tls=options.use_tls,
        tls_trust=options.tls_trust,
    )
    cluster.run(producer.start())
    return producer


def producer_for(options: SinkOptions) -> AsyncProducer:
    """This process's producer for the sink's name servers, group, credentials and TLS settings."""
    return _producers.get(producer_key(options), lambda: _start(options))


def using_producer(options: SinkOptions) -> contextlib.AbstractContextManager[AsyncProducer]:
    """:func:`producer_for`, kept from closing while the block runs (a task's writes)."""
    return _producers.using(producer_key(options), lambda: _start(options))


def check_topic(options: SinkOptions, producer: AsyncProducer | None = None) -> None:
    """On the driver, before any task starts: the name servers answer, and the `topic` option names
    a topic that exists or that the brokers create on the first send (TopicNotExistError if not).
    Asked through `producer` (default: the process's for the options)."""
    if options.topic is not None:
        cluster.run((producer or producer_for(options)).fetch_publish_queues(options.topic))


@dataclass
class Tally:
    """What the brokers acknowledged to one task."""

    queues: QueueTally = field(default_factory=dict)

    def add(self, results: Iterable[SendResult]) -> None:
        for result in results:
            queue = result.message_queue
            key = (queue.topic, queue.broker_name, queue.queue_id)
            last = result.queue_offset + result.count - 1
            count, first, end = self.queues.get(key, (0, result.queue_offset, last))
            self.queues[key] = (count + result.count, min(first, result.queue_offset), max(end, last))


class SendPipeline:
    """The sends of one task, on the process's event loop, each with the query's timeout and retries;
    each producer batch goes through `send` (default: the producer's Arrow send)."""

    def __init__(
        self,
        producer: AsyncProducer,
        options: SinkOptions,
        send: Callable[[Outgoing], Awaitable[list[SendResult]]] | None = None,
    ) -> None:
        self.producer = producer
        self.options = options
        self._send = send or self._send_batch
        self._tails: dict[MessageQueue, asyncio.Future[list[SendResult]]] = {}
        self._slots: asyncio.Semaphore | None = None
        self._running: set[asyncio.Task[Any]] = set()  # every unfinished task of this pipeline

    def _track(self, task: asyncio.Task[Any]) -> None:
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def send(self, outgoing: list[Outgoing]) -> list[SendResult]:
        """Send every producer batch; sends to one queue start after the earlier ones to it ended.

        Each call queues its sends before it first awaits, so calls submitted in order keep their
        order per queue."""
        current = asyncio.current_task()
        if current is not None:
            self._track(current)
        if self._slots is None:
            self._slots = asyncio.Semaphore(REQUESTS_IN_FLIGHT)
        sends = []
        for item in outgoing:
            previous = self._tails.get(item.queue) if item.queue is not None else None
            task = asyncio.ensure_future(self._send_after(previous, item, self._slots))
            self._track(task)
            if item.queue is not None:
                self._tails[item.queue] = task
            sends.append(task)
        return [result for results in await asyncio.gather(*sends) for result in results]

    async def cancel(self) -> None:
        """Cancel every send not finished yet and wait until each has ended."""
        await finish_or_cancel(list(self._running), 0)

    async def _send_after(
        self, previous: asyncio.Future[list[SendResult]] | None, item: Outgoing, slots: asyncio.Semaphore
    ) -> list[SendResult]:
        if previous is not None:
            await previous  # raises its failure: the task fails either way
        async with slots:
            return await self._send(item)

    async def _send_batch(self, item: Outgoing) -> list[SendResult]:
        return await self.producer.send_producer_batch(
            item.batch,
            item.topic,
            queue=item.queue,
            delay_level=item.delay_level,
            timeout_ms=self.options.send_timeout_ms,
            retries=self.options.retries,
        )


def _settle(in_flight: set[Future[list[SendResult]]], tally: Tally, keep: int) -> None:
    """Count the finished sends and wait until at most `keep` are in flight; raises a send's failure
    as soon as it is seen, not only once the sends before it ended."""
    while True:
        for future in [f for f in in_flight if f.done()]:
            in_flight.discard(future)
            tally.add(future.result())
        if len(in_flight) <= keep:
            return
        wait(in_flight, return_when=FIRST_COMPLETED)


def write_partition(
    options: SinkOptions, batches: Iterator[pa.RecordBatch], partition: int | None, ids: IdScope | None = None
) -> tuple[int, QueueTally]:
    """Send every row of a task, with deterministic ids from `ids` if given (random ones if not);
    returns the rows written and what each queue acknowledged. On a failure, the task's sends still
    in flight are cancelled and over before it is raised."""
    with using_producer(options) as producer:
        pipeline = SendPipeline(producer, options)
        tally = Tally()
        in_flight: set[Future[list[SendResult]]] = set()
        split = SplitRows(options, partition, ids, producer)
        try:
            for batch in batches:
                outgoing = split.next(batch)
                if outgoing:
                    in_flight.add(asyncio.run_coroutine_threadsafe(pipeline.send(outgoing), shared_loop().loop))
                    _settle(in_flight, tally, BATCHES_IN_FLIGHT)
            _settle(in_flight, tally, 0)
        except BaseException:
            for future in in_flight:
                future.cancel()
            cluster.run(pipeline.cancel())
            raise
        return split.rows, tally.queues


class SplitRows:
    """A task's Spark batches, one after another, as producer batches per destination
    (:func:`rocketspark.spark.sink.rows.split_batch`), with the task's row count so far."""

    def __init__(
        self, options: SinkOptions, partition: int | None, ids: IdScope | None, producer: AsyncProducer
    ) -> None:
        self.options = options
        self.partition = partition
        self.ids = ids
        self.producer = producer
        self.rows = 0
        self._refreshed: set[str] = set()

    def _queues_of(self, topic: str) -> list[MessageQueue]:
        producer = self.producer
        if topic not in self._refreshed and producer.instance is not None:
            # each task starts from the name servers' current route, not one a previous task left: a
            # broker that crashed and came back (maybe on another address) is written to again at once
            cluster.run(producer.instance.fetch_route(topic))
            self._refreshed.add(topic)
        return cluster.run(producer.fetch_publish_queues(topic))

    def next(self, batch: pa.RecordBatch) -> list[Outgoing]:
        """The batch's rows by destination (none for an empty batch)."""
        if not batch.num_rows:
            return []
        place = RowPlace(self.partition, self.rows)
        outgoing = split_batch(batch, self.options, place, self._queues_of, self.producer.max_message_size, self.ids)
        self.rows += batch.num_rows
        return outgoing
