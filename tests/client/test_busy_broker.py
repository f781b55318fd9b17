"""A broker whose store cannot keep up answers SYSTEM_BUSY; the producer backs off and sends again."""

from __future__ import annotations

import asyncio
import os

import pytest

from rocketspark import AsyncLitePullConsumer, AsyncProducer, ConsumeFromWhere, Message
from rocketspark.client.api.send import send_request
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.headers.send import SendMessageRequestHeader
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.waiting import eventually

MIB = 1024 * 1024


async def flood(namesrv: str, group: str, topic: str, sends: int) -> list[bytes | BaseException]:
    """`sends` concurrent 1 MiB sends to one queue; what each stored (its body) or why it failed."""
    async with AsyncProducer(
        group,
        namesrv_addr=namesrv,
        compress_msg_body_over_bytes=2 * MIB,  # random bodies: compressing them would only cost time
        send_timeout_ms=10_000,
    ) as producer:
        queue = (await producer.fetch_publish_queues(topic))[0]
        bodies = [os.urandom(MIB) for _ in range(sends)]

        async def one(body: bytes) -> bytes:
            await producer.send(Message(topic, body), queue=queue)
            return body

        return await asyncio.gather(*(one(b) for b in bodies), return_exceptions=True)


async def raw_flood(broker: str, topic: str, sends: int) -> list[int]:
    """The same flood as single SEND_MESSAGE_V2 requests with no client around them: the codes."""
    client = RemotingClient(request_timeout_s=10.0)
    try:
        header = SendMessageRequestHeader(
            producer_group="busy_raw",
            topic=topic,
            default_topic="TBW102",
            default_topic_queue_nums=4,
            queue_id=0,
            sys_flag=0,
            born_timestamp=0,
            flag=0,
            properties="",
            reconsume_times=0,
            unit_mode=False,
        )

        async def one() -> int:
            return (
                await client.invoke(broker, send_request(header, os.urandom(MIB), RequestCode.SEND_MESSAGE_V2))
            ).code

        return await asyncio.gather(*(one() for _ in range(sends)))
    finally:
        await client.close()


@pytest.mark.slow
async def test_sends_refused_as_busy_are_sent_again_after_a_pause(servers: ServerFactory) -> None:
    namesrv = servers.namesrv()
    broker = servers.broker(
        namesrv.address,
        *("--set", "flushDiskType=SYNC_FLUSH", "--set", f"sendQueueMaxBytes={4 * MIB}"),
        *("--set", f"maxGroupCommitBytes={4 * MIB}"),
    )
    # without a client's retries the flood meets SYSTEM_BUSY: the broker refuses what its store cannot take
    codes = await raw_flood(broker.address, "BusyControl", 16)
    assert ResponseCode.SYSTEM_BUSY in codes and set(codes) <= {ResponseCode.SUCCESS, ResponseCode.SYSTEM_BUSY}
    # the producer backs off and sends again until its deadline: every send of the same flood is stored
    stored = await flood(namesrv.address, "busy_retries", "BusyRetried", 16)
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
