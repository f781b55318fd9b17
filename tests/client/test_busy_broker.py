"""A broker whose store cannot keep up answers SYSTEM_BUSY; the producer backs off and sends again."""

from __future__ import annotations

import asyncio
import os

import pytest

from rocketspark import AsyncLitePullConsumer, AsyncProducer, ConsumeFromWhere, Message
from rocketspark.client.send_retry import SendError
from tests.harness import ServerFactory
from tests.waiting import eventually

MIB = 1024 * 1024


async def flood(namesrv: str, group: str, topic: str, sends: int, retries: int) -> list[bytes | BaseException]:
    """`sends` concurrent 1 MiB sends to one queue; what each stored (its body) or why it failed."""
    async with AsyncProducer(
        group,
        namesrv_addr=namesrv,
        retry_times_when_send_failed=retries,
        compress_msg_body_over_bytes=2 * MIB,  # random bodies: compressing them would only cost time
        send_timeout_ms=10_000,
    ) as producer:
        queue = (await producer.fetch_publish_queues(topic))[0]
        bodies = [os.urandom(MIB) for _ in range(sends)]

        async def one(body: bytes) -> bytes:
            await producer.send(Message(topic, body), queue=queue)
            return body

        return await asyncio.gather(*(one(b) for b in bodies), return_exceptions=True)


@pytest.mark.slow
async def test_sends_refused_as_busy_are_sent_again_after_a_pause(servers: ServerFactory) -> None:
    namesrv = servers.namesrv()
    servers.broker(
        namesrv.address,
        *("--set", "flushDiskType=SYNC_FLUSH", "--set", f"sendQueueMaxBytes={4 * MIB}"),
        *("--set", f"maxGroupCommitBytes={4 * MIB}"),
    )
    # without retries the flood meets SYSTEM_BUSY: the broker refuses what its store cannot take
    without = await flood(namesrv.address, "busy_no_retries", "BusyControl", 16, retries=0)
    refused = [r for r in without if isinstance(r, BaseException)]
    assert refused and all(isinstance(r, SendError) and "SYSTEM_BUSY" in str(r) for r in refused)
    # with the default retries every send of the same flood is stored, in one queue (order kept)
    stored = await flood(namesrv.address, "busy_retries", "BusyRetried", 16, retries=2)
    assert [r for r in stored if isinstance(r, BaseException)] == []
    consumer = AsyncLitePullConsumer(
        "busy_reader", namesrv_addr=namesrv.address, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    received: set[bytes] = set()
    async with consumer:
        consumer.subscribe("BusyRetried")

        async def everything() -> bool:
            received.update(m.body for m in await consumer.poll(200))
            return len(received) >= 16

        await eventually(everything, timeout_s=30, interval_s=0, what="every stored message")
    assert received == set(stored)
