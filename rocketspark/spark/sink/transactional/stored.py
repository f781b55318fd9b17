"""Which rows of a begun commit are in their topic already, for a driver that finishes another's commit.

Before the first END of a batch the driver notes, per queue its half messages sent alone commit to,
the queue's max offset (`queue_starts`, kept in the `committing` record). A driver that finds the
record still `committing` (its predecessor died among its ENDs) reads each queue from there and
leaves out the half messages whose UNIQ_KEY is stored already (`not_stored_yet`): an Apache broker
would store their rows a second time. (Batches of half messages need none of it: the bundled broker
that takes them commits each half message at most once, however often it is ended.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pyarrow.compute as pc

from rocketspark.client.api.offset import get_max_offset
from rocketspark.client.api.pull import PullStatus
from rocketspark.client.consumer.puller import QueuePuller
from rocketspark.client.instance import ClientInstance
from rocketspark.client.producer.transaction import AsyncTransactionProducer, HalfMessage
from rocketspark.protocol.queue import MessageQueue

#: (topic, broker name, queue id, max offset before the first END)
QueueStart = tuple[str, str, int, int]


def _queues(halves: Sequence[HalfMessage]) -> list[MessageQueue]:
    return sorted({MessageQueue(h.topic, h.broker_name, h.queue_id) for h in halves if h.queue_id >= 0})


def _running(producer: AsyncTransactionProducer) -> ClientInstance:
    if producer.instance is None:
        raise RuntimeError("the transaction producer is not started")
    return producer.instance


def _timeout_s(producer: AsyncTransactionProducer, timeout_ms: int | None) -> float:
    return (timeout_ms or producer.send_timeout_ms) / 1000


async def _max_offset(instance: ClientInstance, queue: MessageQueue, timeout_s: float) -> int:
    address = await instance.broker_address(queue.broker_name, queue.topic)
    return await get_max_offset(instance.remoting, address, queue.topic, queue.queue_id, timeout_s)


async def queue_starts(
    producer: AsyncTransactionProducer, halves: Sequence[Sequence[HalfMessage]], timeout_ms: int | None = None
) -> tuple[QueueStart, ...]:
    """The max offset of every queue the half messages commit to (each asked within `timeout_ms`,
    default the producer's)."""
    instance = _running(producer)
    queues = _queues([half for listed in halves for half in listed])
    timeout_s = _timeout_s(producer, timeout_ms)
    offsets = await asyncio.gather(*(_max_offset(instance, queue, timeout_s) for queue in queues))
    return tuple((q.topic, q.broker_name, q.queue_id, offset) for q, offset in zip(queues, offsets, strict=True))


async def not_stored_yet(
    producer: AsyncTransactionProducer,
    group: str,
    halves: Sequence[Sequence[HalfMessage]],
    starts: Sequence[QueueStart],
    timeout_ms: int | None = None,
) -> list[list[HalfMessage]]:
    """Of each list of half messages, those whose UNIQ_KEY is not in their queue since its start
    (all of a queue without a start), in their order."""
    instance = _running(producer)
    puller = QueuePuller(instance, group)
    stored: set[str] = set()
    for topic, broker_name, queue_id, start in starts:
        queue = MessageQueue(topic, broker_name, queue_id)
        end = await _max_offset(instance, queue, _timeout_s(producer, timeout_ms))
        offset = start
        while offset < end:
            pulled = await puller.pull_batch(queue, offset, max_messages=min(10_000, end - offset))
            if pulled.status is not PullStatus.FOUND or pulled.next_begin_offset <= offset:
                break
            for batch in pulled.batches:
                stored.update(pc.unique(batch.column("msg_id")).to_pylist())
            offset = pulled.next_begin_offset
    started = {(topic, broker_name, queue_id) for topic, broker_name, queue_id, _ in starts}
    return [
        [h for h in listed if (h.topic, h.broker_name, h.queue_id) not in started or h.msg_id not in stored]
        for listed in halves
    ]
