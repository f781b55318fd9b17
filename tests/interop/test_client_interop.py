"""Our client with the real client `rocketmq==0.4.4`: each reads what the other wrote."""

from __future__ import annotations

import asyncio

import pytest

from rocketspark import AsyncLitePullConsumer, AsyncProducer, ConsumeFromWhere, Message
from tests.interop.conftest import Cluster
from tests.interop.driver import OutgoingMessage, Send
from tests.interop.test_real_client import wait_for_pulls
from tests.interop.wire import WireRecorder
from tests.waiting import eventually

pytestmark = pytest.mark.interop


async def test_real_producer_to_our_lite_pull_consumer(cluster: Cluster) -> None:
    topic = "RealToOurs"
    messages = [
        OutgoingMessage(topic, f"from C++ {i} é", tags=f"Tag{i % 3}", keys=f"k{i} alt{i}", properties={"seq": str(i)})
        for i in range(60)
    ]
    outcomes = await asyncio.to_thread(cluster.client.produce, "real_producer", [Send("sync", messages)])
    assert all(o.status == "OK" for o in outcomes), f"{outcomes[:3]}\n{cluster.client.diagnostics()}"
    consumer = AsyncLitePullConsumer(
        "ours_reading",
        namesrv_addr=cluster.namesrv.address,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    received = []
    async with consumer:
        consumer.subscribe(topic, "Tag0 || Tag1")

        async def all_matching() -> bool:
            received.extend(await consumer.poll(200))
            return len(received) >= 40

        await eventually(all_matching, timeout_s=20, interval_s=0, what="the matching messages")
    expected = {(m.body.encode(), m.tags, m.keys, m.properties["seq"]) for m in messages if m.tags in ("Tag0", "Tag1")}
    assert {(m.body, m.tags, m.keys, m.properties["seq"]) for m in received} == expected
    ids = {o.msg_id for o in outcomes}
    assert {m.msg_id for m in received} <= ids  # the real producer's UNIQ_KEYs


async def test_our_producer_to_real_push_consumer(cluster: Cluster) -> None:
    topic = "OursToReal"
    async with AsyncProducer("ours_producing", namesrv_addr=cluster.namesrv.address) as producer:
        await producer.send(Message(topic, b"warm-up", tags="Skip"))  # creates the topic
        queue_count = await cluster.queue_count(topic)
        with WireRecorder(cluster.namesrv.address, cluster.broker.address) as recorder:
            client = cluster.client_via(recorder.namesrv_address)
            consumer = client.start_consumer(
                "real_consumer", topic, expect=40, expression="TagA || TagB", properties=["seq"], max_wait_s=30
            )
            await eventually(lambda: consumer.process.poll() is None, what="the real consumer running")
            # the push consumer starts at the queues' max offsets: send once it pulls every queue
            try:
                await wait_for_pulls(recorder, "real_consumer", topic, queue_count)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{client.diagnostics()}") from None
            sent = {}
            for i in range(45):
                tag = ("TagA", "TagB", "TagC")[i % 3]
                result = await producer.send(
                    Message(topic, f"from Python {i}".encode(), tags=tag, keys=f"key-{i}", properties={"seq": str(i)})
                )
                sent[result.msg_id] = (tag, f"key-{i}", str(i))
            batch = await producer.send_batch(
                [Message(topic, f"batched {i}".encode(), tags="TagA", keys=f"b{i}") for i in range(10)]
            )
            assert sum(r.count for r in batch) == 10
            consumed = await asyncio.to_thread(client.consumed, consumer)
    diagnostics = client.diagnostics()
    singles = [m for m in consumed.messages if m.body.startswith("from Python")]
    assert len(singles) == 30, diagnostics
    for message in singles:
        assert (message.tags, message.keys, message.properties["seq"]) == sent[message.id], diagnostics
    assert sorted(m.body for m in consumed.messages if m.body.startswith("batched")) == sorted(
        f"batched {i}" for i in range(10)
    ), diagnostics
