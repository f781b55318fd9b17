"""Timer messages (RocketMQ 5's TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS) against a broker
subprocess, sent with our client and with raw sends: delivered within 100 ms of their time in due
order, across a restart, retried by delay level once consumed, refused past timerMaxDelaySec, and
ignored by flavor=apache as Apache 4.9 ignores them. The kill -9 case: test_timer_crash.py."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rocketspark import AsyncProducer, AsyncPushConsumer, ConsumeFromWhere, ConsumeStatus, Message, MessageExt
from rocketspark.client.api import admin
from rocketspark.client.api.send import send_back
from rocketspark.errors import MessageIllegalError
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import TIMER_TOPIC
from rocketspark.processes import ServerProcess
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.protocol.headers.send import ConsumerSendMsgBackRequestHeader
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import pull_all, send
from tests.waiting import eventually

WINDOW_OFF = ("--set", "duplicateWindowSeconds=0")  # exactly once must not rest on the duplicate window
#: a push consumer's receipt includes its pull's answer and the hand-over to a consume thread
RECEIPT_MS = 100


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    remoting = RemotingClient(request_timeout_s=10)
    yield remoting
    await remoting.close()


class Receipts:
    """A push consumer's listener: each message with the wall time it was handed over."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: list[tuple[int, MessageExt]] = []

    def __call__(self, messages: list[MessageExt]) -> ConsumeStatus:
        at = now_ms()
        with self.lock:
            self.received += [(at, m) for m in messages]
        return ConsumeStatus.CONSUME_SUCCESS

    def count(self) -> int:
        with self.lock:
            return len(self.received)


def due_of(message: MessageExt) -> int:
    return int(message.properties[props.TIMER_OUT_MS])


async def test_timer_messages_come_within_100_ms_of_their_time_in_due_order(
    servers: ServerFactory, client: RemotingClient
) -> None:
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address, *WINDOW_OFF)
    topic = "TimerOrder"
    await admin.create_topic(client, broker.address, TopicConfig(topic, 2, 2))
    receipts = Receipts()
    consumer = AsyncPushConsumer(
        "timer_order", namesrv_addr=namesrv.address, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    consumer.subscribe(topic)
    consumer.register_listener(receipts)
    await consumer.start()
    try:
        async with AsyncProducer("timer_producer", namesrv_addr=namesrv.address) as producer:
            [queue, _] = await producer.fetch_publish_queues(topic)
            start = now_ms() + 1500  # the consumer is pulling by then
            delays = [900, 300, 600, 300, 0, 1200, 150]
            for i, delay in enumerate(delays):
                result = await producer.send(Message(topic, b"c%d" % i, deliver_time_ms=start + delay), queue=queue)
                assert result.message_queue == queue  # answered with the queue it was sent to
            # Apache's other two properties, relative to the send
            await send(client, broker.address, topic, b"sec", queue_id=queue.queue_id, TIMER_DELAY_SEC="2")
            await send(client, broker.address, topic, b"ms", queue_id=queue.queue_id, TIMER_DELAY_MS="1700")
        assert await pull_all(client, broker.address, topic, queue.queue_id) == []
        parked = await pull_all(client, broker.address, TIMER_TOPIC, 0)
        assert len(parked) == 9 and all(m.properties[props.REAL_TOPIC] == topic for m in parked)
        await eventually(lambda: receipts.count() >= 9, timeout_s=10, interval_s=0.02, what="every receipt")
    finally:
        await consumer.shutdown()
    stored = await pull_all(client, broker.address, topic, queue.queue_id)
    assert [m.body for m in stored if m.body[:1] == b"c"] == [b"c4", b"c6", b"c1", b"c3", b"c2", b"c0", b"c5"]
    assert [due_of(m) for m in stored] == sorted(due_of(m) for m in stored)
    for message in stored:
        assert 0 <= message.store_timestamp - due_of(message) < 100, "stored within 100 ms of its time"
    for at, message in receipts.received:
        assert 0 <= at - due_of(message) < RECEIPT_MS, f"{message.body!r} received {at - due_of(message)} ms late"


async def test_a_restart_keeps_the_parked_messages_and_their_times(
    servers: ServerFactory, client: RemotingClient, tmp_path: Path
) -> None:
    namesrv = servers.namesrv()
    data_dir = tmp_path / "broker-data"
    broker = servers.broker(namesrv.address, *WINDOW_OFF, data_dir=data_dir)
    topic = "TimerRestart"
    await admin.create_topic(client, broker.address, TopicConfig(topic, 1, 1))
    start = now_ms()
    dues = [start + 200, start + 400] + [start + 10_000 + 100 * i for i in range(10)]
    for i, due in enumerate(dues):
        await send(client, broker.address, topic, b"r%02d" % i, TIMER_DELIVER_MS=str(due), UNIQ_KEY=f"R{i}")
    await eventually(lambda: _count(client, broker, topic, 2), timeout_s=5, interval_s=0.02, what="the first two")
    broker.stop()
    broker = servers.broker(namesrv.address, *WINDOW_OFF, data_dir=data_dir)
    assert now_ms() < dues[2], "the restart took longer than the test allows"
    await eventually(lambda: _count(client, broker, topic, 12), timeout_s=20, interval_s=0.02, what="the rest")
    await asyncio.sleep(0.3)
    stored = await pull_all(client, broker.address, topic, 0)
    assert [m.body for m in stored] == [b"r%02d" % i for i in range(12)]
    assert all(0 <= m.store_timestamp - due_of(m) < 100 for m in stored)


async def _count(client: RemotingClient, broker: ServerProcess, topic: str, count: int) -> bool:
    return len(await pull_all(client, broker.address, topic, 0)) >= count


async def test_a_consumed_timer_message_is_retried_by_delay_level(
    servers: ServerFactory, client: RemotingClient
) -> None:
    """A failed timer message goes back through the retry topic after its level's delay, once; its
    timer properties do not park it again."""
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address, *WINDOW_OFF, "--set", "messageDelayLevel=1s")
    topic, group = "TimerRetry", "timer_retry"
    due = now_ms() + 300
    await send(client, broker.address, topic, b"once", TIMER_DELIVER_MS=str(due))
    [delivered] = await eventually(
        lambda: pull_all(client, broker.address, topic, 0), timeout_s=5, interval_s=0.02, what="the delivery"
    )
    sent_back = now_ms()
    header = ConsumerSendMsgBackRequestHeader(
        offset=delivered.commit_log_offset,
        group=group,
        delay_level=0,
        origin_msg_id=delivered.msg_id,
        origin_topic=topic,
        max_reconsume_times=3,
    )
    await send_back(client, broker.address, header)
    [retry] = await eventually(
        lambda: pull_all(client, broker.address, f"%RETRY%{group}", 0), timeout_s=5, what="the retry"
    )
    assert retry.body == b"once" and retry.reconsume_times == 1
    assert retry.store_timestamp - sent_back >= 900  # level 3 + 0 counts as the only level, 1 s
    assert len(await pull_all(client, broker.address, TIMER_TOPIC, 0)) == 1  # parked once, never again


async def test_delivery_times_past_timer_max_delay_sec_are_refused(servers: ServerFactory) -> None:
    namesrv = servers.namesrv()
    servers.broker(namesrv.address, "--set", "timerMaxDelaySec=60")
    async with AsyncProducer("timer_far", namesrv_addr=namesrv.address) as producer:
        with pytest.raises(MessageIllegalError, match=r"at most 60 s \(broker.conf timerMaxDelaySec\)"):
            await producer.send(Message("TimerFar", b"far", deliver_time_ms=now_ms() + 61_000))
        result = await producer.send(Message("TimerFar", b"near", deliver_time_ms=now_ms() + 59_000))
        assert result.queue_offset == 0


async def test_flavor_apache_stores_timer_messages_at_once(servers: ServerFactory, client: RemotingClient) -> None:
    """Apache RocketMQ 4.9 knows no timer properties: the message is stored at once, with them."""
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address, "--set", "flavor=apache")
    await send(client, broker.address, "TimerApache", b"now", TIMER_DELAY_SEC=str(10 * 24 * 3600))
    [stored] = await pull_all(client, broker.address, "TimerApache", 0)
    assert stored.properties[props.TIMER_DELAY_SEC] == str(10 * 24 * 3600)
    assert props.TIMER_OUT_MS not in stored.properties
