"""Push consumer retries: failed messages come back through the group's retry topic, end in its
dead-letter topic, fall back to a plain send; broadcasting retries locally.

The broker runs with one delay level of 1 s, so every retry comes back after about a second.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketspark import ConsumeStatus, MessageExt, MessageModel
from rocketspark.client.api import offset
from rocketspark.errors import TopicNotExistError
from rocketspark.message.properties import codec as props
from rocketspark.remoting.client import RemotingClient
from tests.cli.conftest import run_cli
from tests.client.conftest import Cluster
from tests.client.test_push_consumer import create_topic, push_consumer, send_round_robin
from tests.harness import ServerFactory
from tests.integration.broker_client import pull_all
from tests.waiting import eventually

#: the broker's only delay level: every retry comes back this long after its failure
DELAY_S = 1.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    factory = ServerFactory(tmp_path_factory.mktemp("push-retry-cluster"))
    try:
        namesrv = factory.namesrv()
        settings = ("--set", "registerNameServerPeriod=1000", "--set", f"messageDelayLevel={DELAY_S:.0f}s")
        yield Cluster(namesrv, factory.broker(namesrv.address, *settings))
    finally:
        factory.stop_all()


class Attempts:
    """What a listener saw: (body, reconsume times, topic) per call, thread-safe."""

    def __init__(self) -> None:
        self.seen: list[tuple[bytes, int, str]] = []
        self.lock = threading.Lock()

    def add(self, message: MessageExt) -> None:
        with self.lock:
            self.seen.append((message.body, message.reconsume_times, message.topic))

    def of(self, body: bytes) -> list[int]:
        with self.lock:
            return [times for b, times, _ in self.seen if b == body]


async def stored(cluster: Cluster, topic: str) -> list[MessageExt]:
    remoting = RemotingClient()
    try:
        return await pull_all(remoting, cluster.broker.address, topic, 0)
    finally:
        await remoting.close()


async def test_failed_messages_come_back_through_the_retry_topic(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    topic, group = "PushRetry", "push_retry"
    await create_topic(cluster, topic, 2)
    attempts = Attempts()

    def listener(messages: list[MessageExt]) -> ConsumeStatus:
        (message,) = messages
        attempts.add(message)
        if message.body == b"raise" and message.reconsume_times == 0:
            raise RuntimeError("not yet")
        if message.body == b"later" and message.reconsume_times < 2:
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = push_consumer(cluster, group, listener, topic)
    with caplog.at_level(logging.ERROR, logger="rocketspark.client.consumer.push.listeners"):
        async with consumer:
            await send_round_robin(cluster, topic, [b"plain 1", b"raise", b"later", b"plain 2"])
            await eventually(
                lambda: attempts.of(b"later") == [0, 1, 2] and attempts.of(b"raise") == [0, 1],
                timeout_s=10,
                what="every retry",
            )
    assert attempts.of(b"plain 1") == attempts.of(b"plain 2") == [0]
    assert {seen_topic for _, _, seen_topic in attempts.seen} == {topic}  # never %RETRY%push_retry
    assert f"group {group} raised" in caplog.text
    retried = await stored(cluster, f"%RETRY%{group}")
    assert sorted((m.body, m.reconsume_times) for m in retried) == [(b"later", 1), (b"later", 2), (b"raise", 1)]
    assert {m.properties[props.RETRY_TOPIC] for m in retried} == {topic}
    remoting = RemotingClient()
    try:  # sent back counts as consumed: shutdown committed both queues past every message
        committed = [
            await offset.query_consumer_offset(remoting, cluster.broker.address, group, topic, q) for q in range(2)
        ]
    finally:
        await remoting.close()
    assert committed == [2, 2]


async def test_message_failing_every_time_ends_in_the_dead_letter_topic(cluster: Cluster) -> None:
    topic, group = "PushDead", "push_dead"
    await create_topic(cluster, topic, 1)
    attempts = Attempts()

    def listener(messages: list[MessageExt]) -> ConsumeStatus:
        attempts.add(messages[0])
        return ConsumeStatus.RECONSUME_LATER

    # a wrong extra attempt would come back through the retry topic after the delay (1 s), or be
    # retried here after reconsume_later_delay_ms (0.5 s) had the send-back failed
    async with push_consumer(cluster, group, listener, topic, max_reconsume_times=2, reconsume_later_delay_ms=500):
        await send_round_robin(cluster, topic, [b"hopeless"])
        [dead] = await eventually(lambda: stored(cluster, f"%DLQ%{group}"), timeout_s=10, what="the dead letter")
        await asyncio.sleep(2 * DELAY_S)  # past the earliest moment either could happen
    assert attempts.of(b"hopeless") == [0, 1, 2]
    assert (dead.body, dead.reconsume_times, dead.properties[props.RETRY_TOPIC]) == (b"hopeless", 3, topic)
    # named explicitly, the dead-letter topic reads like any other
    result = await asyncio.to_thread(
        run_cli,
        "consume",
        f"%DLQ%{group}",
        "--offset",
        "earliest",
        "--max",
        "1",
        "--json",
        namesrv=cluster.namesrv_addr,
    )
    assert result.code == 0, result.err
    assert json.loads(result.out.splitlines()[0])["body"] == "hopeless"


async def test_failed_send_back_falls_back_to_a_send_to_the_retry_topic(cluster: Cluster) -> None:
    topic, group = "PushFallback", "push_fallback"
    await create_topic(cluster, topic, 1)
    attempts = Attempts()
    comeback: list[MessageExt] = []

    def listener(messages: list[MessageExt]) -> ConsumeStatus:
        (message,) = messages
        attempts.add(message)
        if message.reconsume_times == 0:
            message.commit_log_offset = 1 << 50  # the broker finds nothing there: the send-back fails
            return ConsumeStatus.RECONSUME_LATER
        comeback.append(message)
        return ConsumeStatus.CONSUME_SUCCESS

    async with push_consumer(cluster, group, listener, topic):
        await send_round_robin(cluster, topic, [b"detour"])
        await eventually(lambda: comeback, timeout_s=10, what="the message sent to the retry topic")
    (message,) = comeback
    assert (message.body, message.reconsume_times, message.topic) == (b"detour", 1, topic)
    assert message.properties[props.ORIGIN_MESSAGE_ID] and message.properties[props.RETRY_TOPIC] == topic


async def test_broadcasting_consumer_retries_locally(cluster: Cluster, tmp_path: Path) -> None:
    topic, group = "PushLocalRetry", "push_local_retry"
    await create_topic(cluster, topic, 1)
    attempts = Attempts()

    def listener(messages: list[MessageExt]) -> ConsumeStatus:
        attempts.add(messages[0])
        return ConsumeStatus.RECONSUME_LATER if messages[0].reconsume_times < 2 else ConsumeStatus.CONSUME_SUCCESS

    consumer = push_consumer(
        cluster,
        group,
        listener,
        topic,
        message_model=MessageModel.BROADCASTING,
        reconsume_later_delay_ms=100,
        offset_store_dir=tmp_path,
    )
    async with consumer:
        await send_round_robin(cluster, topic, [b"local"])
        await eventually(lambda: attempts.of(b"local") == [0, 1, 2], timeout_s=5, what="two local retries")
    with pytest.raises(TopicNotExistError):  # the broker makes retry topics for clustering groups only
        await stored(cluster, f"%RETRY%{group}")
