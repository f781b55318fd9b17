"""Our push consumer with the real client `rocketmq==0.4.4`: it reads what the real producer sends,
and shares a consumer group with the real push consumer, each taking its half of the queues."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import pytest

from rocketspark import AsyncProducer, AsyncPushConsumer, ConsumeFromWhere, ConsumeStatus, Message, MessageExt
from rocketspark.client.api import admin, client_manage
from rocketspark.protocol.body.topic import TopicConfig
from tests.interop.conftest import Cluster
from tests.interop.driver import OutgoingMessage, Send
from tests.waiting import eventually

pytestmark = pytest.mark.interop

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


class Collected:
    def __init__(self) -> None:
        self.messages: list[MessageExt] = []
        self.lock = threading.Lock()

    def __call__(self, messages: list[MessageExt]) -> ConsumeStatus:
        with self.lock:
            self.messages.extend(messages)
        return ConsumeStatus.CONSUME_SUCCESS

    def count(self) -> int:
        with self.lock:
            return len(self.messages)


async def test_our_push_consumer_reads_the_real_producer(cluster: Cluster) -> None:
    topic = "RealToOurPush"
    messages = [
        OutgoingMessage(topic, f"from C++ {i} é", tags=f"Tag{i % 3}", keys=f"k{i}", properties={"seq": str(i)})
        for i in range(60)
    ]
    outcomes = await asyncio.to_thread(cluster.client.produce, "real_push_producer", [Send("sync", messages)])
    assert all(o.status == "OK" for o in outcomes), f"{outcomes[:3]}\n{cluster.client.diagnostics()}"
    collected = Collected()
    consumer = AsyncPushConsumer("our_push_reading", namesrv_addr=cluster.namesrv.address, consume_from_where=FIRST)
    consumer.subscribe(topic, "Tag0 || Tag1")
    consumer.register_listener(collected)
    async with consumer:
        await eventually(lambda: collected.count() >= 40, timeout_s=20, what="the matching messages")
        # whatever else the pulls brought (a Tag2 message, a repeat) has reached the listener once
        # nothing pulled waits for it any more
        await eventually(
            lambda: not any(b.count for b in consumer.backlog().values()), timeout_s=20, what="an empty backlog"
        )
    expected = Counter((m.body.encode(), m.tags, m.keys, m.properties["seq"]) for m in messages if m.tags != "Tag2")
    received = Counter((m.body, m.tags, m.keys, m.properties["seq"]) for m in collected.messages)
    assert received == expected
    assert {m.msg_id for m in collected.messages} <= {o.msg_id for o in outcomes}


@pytest.mark.slow
async def test_real_and_our_push_consumers_split_one_group(cluster: Cluster) -> None:
    topic, group, per_queue = "SharedPushGroup", "CID_shared_push", 5
    await admin.create_topic(cluster.remoting, cluster.broker.address, TopicConfig(topic, 8, 8))
    await eventually(lambda: cluster.queue_count(topic), what=f"a route of {topic}")
    broker = cluster.broker.address
    real = cluster.client.start_consumer(group, topic, expect=4 * per_queue, settle_s=2.0, max_wait_s=60)
    await eventually(
        lambda: client_manage.get_consumer_list(cluster.remoting, broker, group), timeout_s=20, what="the real member"
    )
    collected = Collected()
    ours = AsyncPushConsumer(group, namesrv_addr=cluster.namesrv.address, consume_from_where=FIRST)
    ours.subscribe(topic)
    ours.register_listener(collected)
    async with ours:
        await eventually(lambda: len(ours.assignment()) == 4, timeout_s=20, what="our half of the queues")
        members = await client_manage.get_consumer_list(cluster.remoting, broker, group)
        assert len(members) == 2
        await asyncio.sleep(3)  # the real consumer rebalances on the broker's notification too
        mine = {q.queue_id for q in ours.assignment()}
        async with AsyncProducer("shared_push_producer", namesrv_addr=cluster.namesrv.address) as producer:
            queues = await producer.fetch_publish_queues(topic)
            for i in range(per_queue):
                for queue in queues:
                    await producer.send(Message(topic, f"{queue.queue_id}:{i}".encode()), queue=queue)
        await eventually(lambda: collected.count() >= 4 * per_queue, timeout_s=20, what="our half of the messages")
        consumed = await asyncio.to_thread(cluster.client.consumed, real)
    diagnostics = cluster.client.diagnostics()
    theirs = {q for q in range(8) if q not in mine}
    assert consumed.expected_reached, diagnostics
    assert Counter(m.body for m in collected.messages) == Counter(
        f"{q}:{i}".encode() for q in mine for i in range(per_queue)
    ), diagnostics
    assert Counter(m.body for m in consumed.messages) == Counter(
        f"{q}:{i}" for q in theirs for i in range(per_queue)
    ), diagnostics
