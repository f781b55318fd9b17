"""Producer and lite-pull consumer against a broker subprocess, through both the sync and async APIs."""

from __future__ import annotations

import asyncio
import os
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from rocketspark import (
    AsyncLitePullConsumer,
    AsyncProducer,
    ConsumeFromWhere,
    LitePullConsumer,
    Message,
    MessageQueue,
    Producer,
    SendStatus,
)
from rocketspark.client.api import admin, offset
from rocketspark.client.config import ClientConfig
from rocketspark.client.lifecycle import ClientStateError
from rocketspark.errors import RocketMQError, TopicNotExistError, ValidationError
from rocketspark.message.ids import decode_offset_msg_id
from rocketspark.message.properties import codec as props
from rocketspark.message.records.decoding import decode_records
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient
from tests.client.conftest import Cluster
from tests.waiting import eventually

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


async def poll_until(consumer: AsyncLitePullConsumer, count: int, timeout_s: float = 15.0) -> list:
    received: list = []

    async def enough() -> bool:
        received.extend(await consumer.poll(200))
        return sum(getattr(r, "num_rows", 1) for r in received) >= count

    await eventually(enough, timeout_s=timeout_s, interval_s=0, what=f"{count} messages")
    return received


def test_sync_round_trip_with_tags_keys_properties_and_compression(cluster: Cluster) -> None:
    big = bytes(range(256)) * 40  # 10 KiB: compressed by the producer, inflated for the consumer
    sent = {}
    with Producer("sync_producer", namesrv_addr=cluster.namesrv_addr) as producer:
        for i in range(20):
            body = big if i == 7 else f"message {i}".encode()
            result = producer.send(
                Message("SyncRoundTrip", body, tags=f"Tag{i % 2}", keys=f"key-{i} other-{i}", properties={"n": str(i)})
            )
            assert result.status is SendStatus.SEND_OK
            sent[result.msg_id] = body
    with LitePullConsumer("sync_consumer", namesrv_addr=cluster.namesrv_addr, consume_from_where=FIRST) as consumer:
        consumer.subscribe("SyncRoundTrip")
        received = []
        deadline = time.monotonic() + 15
        while len(received) < 20 and time.monotonic() < deadline:
            received.extend(consumer.poll(500))
    assert {m.msg_id: m.body for m in received} == sent
    for message in received:
        n = int(message.properties["n"])
        assert message.tags == f"Tag{n % 2}" and message.keys == f"key-{n} other-{n}"
        assert message.sys_flag & 0x1 == 0  # decompressed


async def test_send_async_oneway_and_batches_split_by_size(cluster: Cluster) -> None:
    async with AsyncProducer("batch_producer", namesrv_addr=cluster.namesrv_addr, max_message_size=2_000) as producer:
        futures = [producer.send_async(Message("Batches", f"async {i}".encode())) for i in range(10)]
        assert all(r.status is SendStatus.SEND_OK for r in await asyncio.gather(*futures))
        await producer.send_oneway(Message("Batches", b"oneway"))
        results = await producer.send_batch([Message("Batches", bytes([65 + i % 26]) * 300) for i in range(20)])
        assert len(results) > 1  # split so that no request exceeds max_message_size
        assert sum(r.count for r in results) == 20
        assert all(len(r.msg_id.split(",")) == r.count for r in results)
    async with AsyncLitePullConsumer(
        "batch_consumer", namesrv_addr=cluster.namesrv_addr, consume_from_where=FIRST
    ) as consumer:
        consumer.subscribe("Batches")
        received = await poll_until(consumer, 31)
    assert sorted(m.body for m in received if m.body.startswith(b"async")) == sorted(
        f"async {i}".encode() for i in range(10)
    )
    assert b"oneway" in [m.body for m in received]


async def test_sharding_key_keeps_one_queue_in_order(cluster: Cluster) -> None:
    async with AsyncProducer("orderly_producer", namesrv_addr=cluster.namesrv_addr) as producer:
        results = [await producer.send(Message("Sharded", f"{i}".encode()), sharding_key="order-42") for i in range(10)]
    assert len({r.message_queue for r in results}) == 1
    assert [r.queue_offset for r in results] == list(range(10))


@pytest.mark.parametrize("arrow_consumer", [True, False])
async def test_arrow_send_round_trips(cluster: Cluster, arrow_consumer: bool) -> None:
    topic = f"ArrowRoundTrip{int(arrow_consumer)}"
    table = pa.table(
        {
            "body": [f"row {i}".encode() for i in range(500)],
            "tags": [f"T{i % 3}" for i in range(500)],
            "keys": [f"k{i}" for i in range(500)],
            "properties": pa.array([[("color", "red")]] * 500, pa.map_(pa.string(), pa.string())),
        }
    )
    async with AsyncProducer("arrow_producer", namesrv_addr=cluster.namesrv_addr) as producer:
        results = await producer.send_arrow(table, topic)
    assert sum(r.count for r in results) == 500
    consumer = AsyncLitePullConsumer(
        "arrow_consumer",
        namesrv_addr=cluster.namesrv_addr,
        consume_from_where=FIRST,
        arrow=arrow_consumer,
        pull_batch_size=1000,
    )
    async with consumer:
        consumer.subscribe(topic, "T0 || T1")
        received = await poll_until(consumer, 334)
    if arrow_consumer:
        rows = pa.Table.from_batches(received).to_pylist()
        bodies = {r["body"] for r in rows}
        assert all(props.decode_properties(r["properties"])["color"] == "red" for r in rows)
    else:
        bodies = {m.body for m in received}
        assert all(m.properties["color"] == "red" for m in received)
    assert bodies == {f"row {i}".encode() for i in range(500) if i % 3 != 2}


async def test_seek_by_timestamp_commit_and_committed(cluster: Cluster) -> None:
    async with AsyncProducer("seek_producer", namesrv_addr=cluster.namesrv_addr) as producer:
        queue = (await producer.fetch_publish_queues("Seeking"))[0]
        for i in range(5):
            await producer.send(Message("Seeking", f"early {i}".encode()), queue=queue)
        await asyncio.sleep(0.05)
        middle = int(time.time() * 1000)
        await asyncio.sleep(0.05)
        for i in range(5):
            await producer.send(Message("Seeking", f"late {i}".encode()), queue=queue)
    consumer = AsyncLitePullConsumer("seek_group", namesrv_addr=cluster.namesrv_addr, auto_commit=False)
    async with consumer:
        consumer.assign([queue])
        await eventually(lambda: queue in consumer.assignment(), what="the assignment")
        assert await consumer.offset_for_timestamp(queue, middle) == 5
        await consumer.seek(queue, 5)
        late = await poll_until(consumer, 5)
        assert [m.body for m in late] == [f"late {i}".encode() for i in range(5)]
        await consumer.seek_to_begin(queue)
        assert [m.body for m in await poll_until(consumer, 10)][:2] == [b"early 0", b"early 1"]
        with pytest.raises(ValidationError, match="cannot seek"):
            await consumer.seek(queue, 99)
        assert await consumer.committed(queue) == -1
        await consumer.commit()
        assert await consumer.committed(queue) == 10
    remoting = RemotingClient()
    try:
        stored = await offset.query_consumer_offset(
            remoting, cluster.broker.address, "seek_group", "Seeking", queue.queue_id, set_zero_if_not_found=False
        )
        assert stored == 10
    finally:
        await remoting.close()


async def test_auto_commit_and_restart_resumes(cluster: Cluster) -> None:
    async with AsyncProducer("resume_producer", namesrv_addr=cluster.namesrv_addr) as producer:
        for i in range(6):
            await producer.send(Message("Resume", f"{i}".encode()))
    first = AsyncLitePullConsumer("resume_group", namesrv_addr=cluster.namesrv_addr, consume_from_where=FIRST)
    async with first:
        first.subscribe("Resume")
        assert len(await poll_until(first, 6)) == 6
    async with AsyncProducer("resume_producer", namesrv_addr=cluster.namesrv_addr) as producer:
        await producer.send(Message("Resume", b"after restart"))
    second = AsyncLitePullConsumer("resume_group", namesrv_addr=cluster.namesrv_addr, consume_from_where=FIRST)
    async with second:
        second.subscribe("Resume")
        assert [m.body for m in await poll_until(second, 1)] == [b"after restart"]


async def test_two_members_share_the_queues(cluster: Cluster) -> None:
    remoting = RemotingClient()
    await admin.create_topic(remoting, cluster.broker.address, TopicConfig("Shared", 4, 4))
    await remoting.close()
    a = AsyncLitePullConsumer("sharing", namesrv_addr=cluster.namesrv_addr, rebalance_interval_ms=500)
    # a second member in the same process needs an instance (a client id) of its own, as in Java
    member_b = ClientConfig(namesrv_addr=cluster.namesrv_addr, instance_name="member-b")
    b = AsyncLitePullConsumer("sharing", client_config=member_b, rebalance_interval_ms=500)
    a.subscribe("Shared")
    b.subscribe("Shared")
    await a.start()
    try:
        await eventually(lambda: len(a.assignment()) == 4, timeout_s=10, what="all queues for the only member")
        await b.start()
        try:
            await eventually(
                lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, timeout_s=10, what="two queues each"
            )
            assert a.assignment().isdisjoint(b.assignment())
        finally:
            await b.shutdown()
        await eventually(lambda: len(a.assignment()) == 4, timeout_s=10, what="the queues back")
    finally:
        await a.shutdown()


async def test_lifecycle_misuse_is_a_clear_error(cluster: Cluster) -> None:
    producer = AsyncProducer("life_producer", namesrv_addr=cluster.namesrv_addr)
    with pytest.raises(ClientStateError, match="call start"):
        await producer.send(Message("Life", b"x"))
    await producer.start()
    try:
        with pytest.raises(ClientStateError, match="starts once"):
            await producer.start()
        twin = AsyncProducer("life_producer", namesrv_addr=cluster.namesrv_addr)
        with pytest.raises(ValidationError, match="already registered"):
            await twin.start()
    finally:
        await producer.shutdown()
    with pytest.raises(ClientStateError, match="SHUTDOWN_ALREADY"):
        await producer.send(Message("Life", b"x"))
    with pytest.raises(ValidationError, match="reserved"):
        await AsyncProducer("DEFAULT_PRODUCER", namesrv_addr=cluster.namesrv_addr).start()


async def test_bad_messages_are_refused_before_sending(cluster: Cluster) -> None:
    async with AsyncProducer("refusing", namesrv_addr=cluster.namesrv_addr, max_message_size=1024) as producer:
        with pytest.raises(ValidationError, match="limit is 1,024 bytes"):
            await producer.send(Message("Refused", b"x" * 1025))
        with pytest.raises(ValidationError, match="empty"):
            await producer.send(Message("Refused", b""))
        with pytest.raises(ValidationError, match="characters"):
            await producer.send(Message("bad topic", b"x"))
        with pytest.raises(ValidationError, match="system keys"):
            await producer.send(Message("Refused", b"x", properties={"UNIQ_KEY": "mine"}))


async def test_unreachable_name_server_fails_fast_and_clearly() -> None:
    started = time.monotonic()
    producer = AsyncProducer("lonely", namesrv_addr="127.0.0.1:1", send_timeout_ms=2_000)
    async with producer:
        with pytest.raises(RocketMQError, match="no name server answered"):
            await producer.send(Message("Nowhere", b"x"))
    assert time.monotonic() - started < 10


async def test_unknown_topic_without_auto_create(servers) -> None:
    namesrv = servers.namesrv()
    servers.broker(namesrv.address, "--set", "autoCreateTopicEnable=false")
    async with AsyncProducer("strict", namesrv_addr=namesrv.address) as producer:
        await asyncio.sleep(0.5)
        with pytest.raises(TopicNotExistError, match=f"name server {namesrv.address}"):
            await producer.send(Message("NotThere", b"x"))


def test_queue_type_is_exported() -> None:
    assert MessageQueue("T", "b", 0) < MessageQueue("T", "b", 1)


def test_blocking_subscribe_and_assign_raise_in_the_caller(cluster: Cluster) -> None:
    with LitePullConsumer("blocking_errors", namesrv_addr=cluster.namesrv_addr) as consumer:
        with pytest.raises(ValidationError, match="topic"):
            consumer.subscribe("no spaces allowed")
        with pytest.raises(ValidationError, match="names no tag"):
            consumer.subscribe("BlockingErrors", " || ")
        consumer.subscribe("BlockingErrors")
        with pytest.raises(ValidationError, match="do not mix"):
            consumer.assign([MessageQueue("BlockingErrors", "broker-a", 0)])


async def test_arrow_send_result_carries_the_offset_msg_id(cluster: Cluster) -> None:
    table = pa.table({"body": [f"located {i}".encode() for i in range(50)]})
    async with AsyncProducer("arrow_offset_ids", namesrv_addr=cluster.namesrv_addr) as producer:
        (result,) = await producer.send_arrow(table, "ArrowOffsetIds")
    store_host, commit_log_offset = decode_offset_msg_id(result.offset_msg_id)
    assert store_host == cluster.broker.address
    remoting = RemotingClient()
    try:
        (first,) = decode_records(await admin.view_message(remoting, store_host, commit_log_offset))
    finally:
        await remoting.close()
    assert (first.body, first.msg_id, first.queue_offset) == (b"located 0", result.msg_id, result.queue_offset)


@pytest.mark.slow
@pytest.mark.parametrize("arrow", [False, True])
async def test_buffered_bytes_per_queue_are_bounded(cluster: Cluster, arrow: bool) -> None:
    topic, body_size, count, batch = f"ByteBound{int(arrow)}", 64 * 1024, 200, 8
    async with AsyncProducer(f"byte_bound_producer{int(arrow)}", namesrv_addr=cluster.namesrv_addr) as producer:
        queue = (await producer.fetch_publish_queues(topic))[0]
        await producer.send_batch([Message(topic, os.urandom(body_size)) for _ in range(count)], queue=queue)
    consumer = AsyncLitePullConsumer(
        f"byte_bound_reader{int(arrow)}",
        namesrv_addr=cluster.namesrv_addr,
        consume_from_where=FIRST,
        arrow=arrow,
        pull_batch_size=batch,
        pull_threshold_size_for_queue=1,  # MiB: 16 of these bodies; the 200 sent hold 12.5 MiB
    )

    def body_bytes(polled: list) -> int:
        if arrow:
            return sum(pc.sum(pc.binary_length(b.column("body"))).as_py() for b in polled)
        return sum(len(m.body) for m in polled)

    async with consumer:
        consumer.assign([queue])
        await asyncio.sleep(2)  # the background pull fills the buffer as far as the bound lets it
        buffered = body_bytes(await consumer.poll(1_000))
        # the bound stops pulling once reached: at most one pull beyond it
        assert 0 < buffered <= 1024 * 1024 + batch * body_size
        received = [buffered]

        async def the_rest() -> bool:
            received.append(body_bytes(await consumer.poll(200)))
            return sum(received) == count * body_size

        await eventually(the_rest, timeout_s=30, interval_s=0, what="every message after the pauses")


async def test_a_reset_to_a_time_seeks_and_commits(cluster: Cluster) -> None:
    """INVOKE_BROKER_TO_RESET_OFFSET (the dashboard's reset) with the consumer online: it reads every
    message again from the time on, and commits the offsets of the time at once (auto-commit)."""
    remoting = RemotingClient()
    await admin.create_topic(remoting, cluster.broker.address, TopicConfig("LiteReset", 2, 2))
    before_ms = int(time.time() * 1000) - 1_000
    async with AsyncProducer("lite_reset_producer", namesrv_addr=cluster.namesrv_addr) as producer:
        queues = await producer.fetch_publish_queues("LiteReset")
        for i in range(10):
            await producer.send(Message("LiteReset", f"{i}".encode()), queue=queues[i % 2])
    consumer = AsyncLitePullConsumer("lite_reset", namesrv_addr=cluster.namesrv_addr, consume_from_where=FIRST)

    async def committed(expected: list[int]) -> bool:
        return [await consumer.committed(queue) for queue in queues] == expected

    try:
        async with consumer:
            consumer.subscribe("LiteReset")
            first = await poll_until(consumer, 10)
            await consumer.commit()
            assert await committed([5, 5])
            answer = await admin.invoke_reset_offset(
                remoting, cluster.broker.address, "LiteReset", "lite_reset", before_ms
            )
            assert answer is not None and sorted(answer.offset_table.values()) == [0, 0]
            await eventually(lambda: committed([0, 0]), timeout_s=5, what="the reset offsets committed")
            again = await poll_until(consumer, 10)
    finally:
        await remoting.close()
    assert sorted(m.body for m in again) == sorted(m.body for m in first)
