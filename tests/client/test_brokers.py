"""The client with several brokers: Arrow fallback, failover when a broker dies, dead-broker errors."""

from __future__ import annotations

import asyncio
import time

import pyarrow as pa
import pytest

from rocketspark import AsyncLitePullConsumer, AsyncProducer, ConsumeFromWhere, Message
from rocketspark.client.api import admin
from rocketspark.errors import RocketMQError
from rocketspark.processes import wait_registered
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.waiting import eventually

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def sample_table(rows: int) -> pa.Table:
    return pa.table(
        {
            "body": [f"payload {i} ".encode() * 3 for i in range(rows)],
            "tags": [f"T{i % 2}" for i in range(rows)],
            "keys": [f"key-{i}" for i in range(rows)],
            "uniq_key": [f"ID{i:08d}" for i in range(rows)],
            "properties": pa.array([[("n", str(i))] for i in range(rows)], pa.map_(pa.string(), pa.string())),
        }
    )


async def send_and_read(namesrv: str, topic: str, table: pa.Table) -> pa.Table:
    async with AsyncProducer(f"{topic}_producer", namesrv_addr=namesrv) as producer:
        results = await producer.send_arrow(table, topic)
    assert sum(r.count for r in results) == table.num_rows
    consumer = AsyncLitePullConsumer(f"{topic}_consumer", namesrv_addr=namesrv, consume_from_where=FIRST, arrow=True)
    batches: list[pa.RecordBatch] = []
    async with consumer:
        consumer.subscribe(topic)

        async def everything() -> bool:
            batches.extend(await consumer.poll(200))
            return sum(b.num_rows for b in batches) >= table.num_rows

        await eventually(everything, timeout_s=20, interval_s=0, what="every row")
    columns = ["msg_id", "body", "tags", "keys", "properties", "flag", "reconsume_times"]
    return pa.Table.from_batches(batches).select(columns).sort_by("msg_id")


async def test_arrow_codes_on_and_off_give_identical_results(servers: ServerFactory) -> None:
    namesrv = servers.namesrv()
    arrow_broker = servers.broker(namesrv.address, broker_name="broker-arrow")
    table = sample_table(2000)
    with_arrow = await send_and_read(namesrv.address, "WithArrow", table)

    plain_namesrv = servers.namesrv()
    plain_broker = servers.broker(plain_namesrv.address, "--set", "arrowEnable=false", broker_name="broker-plain")
    without_arrow = await send_and_read(plain_namesrv.address, "WithoutArrow", table)

    assert with_arrow.equals(without_arrow)
    assert with_arrow.column("msg_id").to_pylist() == [f"ID{i:08d}" for i in range(2000)]
    remoting = RemotingClient()
    try:
        used_arrow = await admin.get_runtime_info(remoting, arrow_broker.address)
        fell_back = await admin.get_runtime_info(remoting, plain_broker.address)
    finally:
        await remoting.close()
    assert int(used_arrow["arrowSendMessages"]) == 2000 and int(used_arrow["arrowPullMessages"]) >= 2000
    assert int(used_arrow["standardSendMessages"]) == 0 and int(used_arrow["standardPullMessages"]) == 0
    assert int(fell_back["standardSendMessages"]) == 2000 and int(fell_back["standardPullMessages"]) >= 2000
    assert int(fell_back["arrowSendMessages"]) == 0 and int(fell_back["arrowPullMessages"]) == 0


@pytest.mark.slow
async def test_producer_fails_over_when_a_broker_dies(servers: ServerFactory, tmp_path) -> None:
    namesrv = servers.namesrv()
    data_a = tmp_path / "broker-a"
    broker_a = servers.broker(namesrv.address, broker_name="broker-a", data_dir=data_a)
    broker_b = servers.broker(namesrv.address, broker_name="broker-b")
    remoting = RemotingClient()
    for broker in (broker_a, broker_b):
        await admin.create_topic(remoting, broker.address, TopicConfig("Failover", 2, 2))
    await remoting.close()
    acknowledged: dict[bytes, str] = {}
    async with AsyncProducer("failover_producer", namesrv_addr=namesrv.address, send_timeout_ms=5_000) as producer:

        async def both_routed() -> bool:
            assert producer.instance is not None
            await producer.instance.route("Failover", refresh=True)
            return len(await producer.fetch_publish_queues("Failover")) == 4

        await eventually(both_routed, what="both brokers routed")
        for i in range(300):
            if i == 100:
                broker_a.kill()
            body = f"m{i:04d}".encode()
            result = await producer.send(Message("Failover", body))
            acknowledged[body] = result.message_queue.broker_name
    after_kill = list(acknowledged.values())[100:]
    assert after_kill.count("broker-b") == 200  # every send after the kill went through broker-b
    servers.broker(namesrv.address, broker_name="broker-a", data_dir=data_a)  # back, with its data
    consumer = AsyncLitePullConsumer("failover_reader", namesrv_addr=namesrv.address, consume_from_where=FIRST)
    received: list[bytes] = []
    async with consumer:
        consumer.subscribe("Failover")

        async def all_back() -> bool:
            received.extend(m.body for m in await consumer.poll(200))
            return set(received) >= set(acknowledged)

        await eventually(all_back, timeout_s=30, interval_s=0, what="every acknowledged message")
    assert len(received) == len(set(received))


async def test_dead_broker_is_a_clear_error_within_the_timeout(servers: ServerFactory) -> None:
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address)
    async with AsyncProducer("doomed", namesrv_addr=namesrv.address, send_timeout_ms=2_000) as producer:
        await producer.send(Message("Doomed", b"first"))
        broker.kill()
        started = time.monotonic()
        with pytest.raises(RocketMQError, match="Doomed"):
            await producer.send(Message("Doomed", b"second"))
        assert time.monotonic() - started < 5
        await asyncio.sleep(0)


@pytest.mark.slow
async def test_arrow_fallback_sends_fail_over_like_any_send(servers: ServerFactory) -> None:
    namesrv = servers.namesrv()
    brokers = servers.brokers(namesrv.address, ("broker-a", "broker-b"), "--set", "arrowEnable=false")
    remoting = RemotingClient()
    try:
        for broker in brokers.values():
            await admin.create_topic(remoting, broker.address, TopicConfig("ArrowFailover", 2, 2))
            wait_registered(namesrv.address, broker.address, ("ArrowFailover",))
        async with AsyncProducer("arrow_failover", namesrv_addr=namesrv.address, send_timeout_ms=5_000) as producer:
            assert len(await producer.fetch_publish_queues("ArrowFailover")) == 4
            for _ in range(4):  # both brokers answer the Arrow send "not supported" and are remembered
                await producer.send_arrow(sample_table(10), "ArrowFailover")
            brokers["broker-a"].kill()
            after_kill = [await producer.send_arrow(sample_table(10), "ArrowFailover") for _ in range(8)]
        assert {r.message_queue.broker_name for results in after_kill for r in results} == {"broker-b"}
        stored = await admin.get_runtime_info(remoting, brokers["broker-b"].address)
        assert int(stored["standardSendMessages"]) >= 80 and int(stored["arrowSendMessages"]) == 0
    finally:
        await remoting.close()


async def test_a_producer_holding_fixed_queues_waits_for_a_restarting_broker(servers: ServerFactory, tmp_path) -> None:
    """With `hold_fixed_queues` (the Spark sink's producer), a send to a queue of a killed broker is
    tried again on that queue until the broker is back (on a new port); without it, it fails at once."""
    namesrv = servers.namesrv()
    data = tmp_path / "broker-b"
    servers.broker(namesrv.address, broker_name="broker-a")
    broker_b = servers.broker(namesrv.address, broker_name="broker-b", data_dir=data)
    remoting = RemotingClient()
    await admin.create_topic(remoting, broker_b.address, TopicConfig("Held", 2, 2))
    await remoting.close()
    holding = AsyncProducer(
        "held_producer", namesrv_addr=namesrv.address, send_timeout_ms=60_000, hold_fixed_queues=True
    )
    plain = AsyncProducer("plain_producer", namesrv_addr=namesrv.address, send_timeout_ms=60_000)
    await asyncio.to_thread(wait_registered, namesrv.address, broker_b.address, ("Held",))
    async with holding, plain:
        queue = (await holding.fetch_publish_queues("Held"))[1]
        assert queue.broker_name == "broker-b"
        await plain.fetch_publish_queues("Held")
        broker_b.kill()
        started = time.monotonic()
        with pytest.raises(RocketMQError):
            await plain.send(Message("Held", b"not held"), queue=queue)
        assert time.monotonic() - started < 10

        held = asyncio.ensure_future(holding.send(Message("Held", b"held"), queue=queue))
        await asyncio.sleep(2)
        assert not held.done()  # still trying broker-b
        servers.broker(namesrv.address, broker_name="broker-b", data_dir=data)  # back, on another port
        result = await asyncio.wait_for(held, 50)
    assert result.message_queue == queue
