"""Ending many half messages at once: each END_TRANSACTION waits for the broker's answer, many in
flight, so the caller knows every end was stored (the broker stores each commit once, however
often a half message is ended)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rocketspark.client.producer.transaction import AsyncTransactionProducer, HalfMessage, TransactionStatus

#: END_TRANSACTION requests in flight at once
ENDS_IN_FLIGHT = 64


async def end_halves(
    producer: AsyncTransactionProducer, halves: Sequence[HalfMessage], status: TransactionStatus
) -> None:
    """End every half message by `status`; raises the first failure once all ends are over."""
    slots = asyncio.Semaphore(ENDS_IN_FLIGHT)

    async def end(half: HalfMessage) -> None:
        async with slots:
            await producer.end_transaction(half, status, wait=True)

    results = await asyncio.gather(*(end(half) for half in halves), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        raise failures[0]
