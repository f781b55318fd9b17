"""Ending many half messages at once: each END_TRANSACTION waits for the broker's answer, so the
caller knows every end was stored.

The ENDs of one queue (the real queue a half message commits to) go one after another in the order
given, each once the broker answered the one before: a broker handles the ENDs it has at once on
many threads (Apache RocketMQ's EndTransactionProcessor runs on a pool), so ENDs sent together may
be stored in any order, and rows of one queue would reach it out of their order. Queues are ended
concurrently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rocketspark.client.producer.transaction import AsyncTransactionProducer, HalfMessage, TransactionStatus

#: END_TRANSACTION requests in flight at once (at most one a queue)
ENDS_IN_FLIGHT = 64


async def end_halves(
    producer: AsyncTransactionProducer,
    halves: Sequence[HalfMessage],
    status: TransactionStatus,
    timeout_ms: int | None = None,
) -> None:
    """End every half message by `status`, in order within each queue, each within `timeout_ms`
    (default: the producer's); raises the first failure once all ends are over. A queue whose END
    failed ends none of its later half messages."""
    slots = asyncio.Semaphore(ENDS_IN_FLIGHT)
    queues: dict[tuple[str, str, int], list[HalfMessage]] = {}
    for half in halves:
        queues.setdefault((half.topic, half.broker_name, half.queue_id), []).append(half)

    async def end_in_order(queue: list[HalfMessage]) -> None:
        for half in queue:
            async with slots:
                await producer.end_transaction(half, status, wait=True, timeout_ms=timeout_ms)

    results = await asyncio.gather(*(end_in_order(queue) for queue in queues.values()), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        raise failures[0]
