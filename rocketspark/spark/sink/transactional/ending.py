"""Ending many half messages at once, each END waiting for the broker's answer, so the caller knows
every end was stored.

Half messages sent alone are ended one END_TRANSACTION each. Those of one group (a task attempt)
and one queue (the real queue a half message commits to) go one after another in the order given,
each once the broker answered the one before: a broker handles the ENDs it has at once on many
threads (Apache RocketMQ's EndTransactionProcessor runs on a pool), so ENDs sent together may be
stored in any order, and a partition's rows of one queue would reach it out of their order. Queues
and groups are ended concurrently: only the order within a Spark partition is kept, as the plain
sink keeps it.

Half messages sent in batches (to a bundled broker) are ended by range (END_TRANSACTION_RANGE): the
broker ends the attempt's half messages of the range a step at a time, in offset order, so each
queue's rows in their order; the ranges of different attempts concurrently. A range whose broker
finds fewer of the attempt's half messages than the task reported is data loss.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rocketspark.client.producer.transaction import AsyncTransactionProducer, HalfMessage, TransactionStatus
from rocketspark.errors import DataLossError
from rocketspark.message.validation import TRANS_HALF_TOPIC
from rocketspark.spark.sink.transactional.record import HalfRange

#: END_TRANSACTION requests in flight at once (at most one a queue of a group)
ENDS_IN_FLIGHT = 64


async def end_halves(
    producer: AsyncTransactionProducer,
    groups: Sequence[Sequence[HalfMessage]],
    status: TransactionStatus,
    timeout_ms: int | None = None,
) -> None:
    """End every half message by `status`, in order within each group's queue, each within
    `timeout_ms` (default: the producer's); raises the first failure once all ends are over. A
    queue whose END failed ends none of its later half messages."""
    slots = asyncio.Semaphore(ENDS_IN_FLIGHT)
    chains: list[list[HalfMessage]] = []
    for group in groups:
        queues: dict[tuple[str, str, int], list[HalfMessage]] = {}
        for half in group:
            queues.setdefault((half.topic, half.broker_name, half.queue_id), []).append(half)
        chains.extend(queues.values())

    async def end_in_order(chain: list[HalfMessage]) -> None:
        for half in chain:
            async with slots:
                await producer.end_transaction(half, status, wait=True, timeout_ms=timeout_ms)

    results = await asyncio.gather(*(end_in_order(chain) for chain in chains), return_exceptions=True)
    _raise_first(results)


async def end_ranges(
    producer: AsyncTransactionProducer,
    ranges: Sequence[HalfRange],
    status: TransactionStatus,
    timeout_ms: int | None = None,
) -> None:
    """End the half messages of each range (of batches: `batched`) by `status`, the ranges
    concurrently; DataLossError when a broker ends fewer than the range counts (it no longer holds
    them: fileReservedTime). Raises the first failure once all are over."""

    async def end(span: HalfRange) -> None:
        ended = await producer.end_range(
            span.broker_name, span.attempt, span.first, span.last, status, topic=TRANS_HALF_TOPIC, timeout_ms=timeout_ms
        )
        if ended != span.count:
            raise DataLossError(
                f"broker {span.broker_name} ended {ended} half messages of task attempt {span.attempt} at offsets "
                f"{span.first}..{span.last} of its half queue, where the task stored {span.count}: the broker no "
                "longer has them all (fileReservedTime), so this batch cannot be committed whole"
            )

    results = await asyncio.gather(*(end(span) for span in ranges), return_exceptions=True)
    _raise_first(results)


def _raise_first(results: Sequence[object]) -> None:
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        raise failures[0]
