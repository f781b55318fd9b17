"""Delayed writes and the retry topics with Spark: the sink's delay level (column or option), and the
source reading a dead-letter topic named explicitly. The brokers' only delay level is 1 s."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from rocketspark.client.api.send import send_back
from rocketspark.errors import ValidationError
from rocketspark.message.message import MessageExt
from rocketspark.message.properties import codec as props
from rocketspark.protocol.headers.send import ConsumerSendMsgBackRequestHeader
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.client import RemotingClient
from rocketspark.spark.sink.options import parse_sink
from rocketspark.spark.sink.rows import RowPlace, split_batch
from tests.harness import ServerFactory
from tests.integration.broker_client import pull_all, send
from tests.spark.cluster import SparkCluster, two_brokers_on
from tests.waiting import eventually


@pytest.fixture(scope="module")
def delayed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    factory = ServerFactory(tmp_path_factory.mktemp("sink-delay"))
    try:
        yield two_brokers_on(factory, "--set", "messageDelayLevel=1s")
    finally:
        factory.stop_all()


def read_bodies(spark: SparkSession, cluster: SparkCluster, topic: str) -> list[str]:
    frame = spark.read.format("rocketmq").option("nameserver", cluster.namesrv_addr).option("topic", topic).load()
    return sorted(bytes(row.body).decode() for row in frame.select("body").collect())


async def stored(cluster: SparkCluster, topic: str) -> dict[str, MessageExt]:
    """The topic's messages by body, read with direct pulls."""
    client = RemotingClient(request_timeout_s=10)
    try:
        return {
            message.body.decode(): message
            for broker in cluster.brokers.values()
            for queue_id in range(2)
            for message in await pull_all(client, broker.address, topic, queue_id)
        }
    finally:
        await client.close()


@pytest.mark.slow
def test_delayed_rows_arrive_after_their_level(spark: SparkSession, delayed: SparkCluster) -> None:
    topic = "SinkDelayed"
    delayed.create_topic(topic, 2)
    rows = [("now", 0), ("option level", None), ("column level", 2)]  # level 2 counts as the last, 1 s
    frame = spark.createDataFrame(rows, "body string, delayLevel int")
    writer = frame.write.format("rocketmq").option("nameserver", delayed.namesrv_addr).option("topic", topic)
    writer.option("delayLevel", "1").mode("append").save()
    messages = asyncio.run(
        eventually(lambda: _all_of(stored(delayed, topic), len(rows)), timeout_s=10, what="every row delivered")
    )
    # the delayed rows went through SCHEDULE_TOPIC_XXXX (which sets REAL_TOPIC) and were stored in
    # the topic a second after they were sent; the other one at once
    for body, message in messages.items():
        delayed_row = body != "now"
        assert (props.REAL_TOPIC in message.properties) == delayed_row
        assert (message.store_timestamp - message.born_timestamp >= 1000) == delayed_row
    assert read_bodies(spark, delayed, topic) == sorted(messages)


async def _all_of(found: Awaitable[dict[str, MessageExt]], count: int) -> dict[str, MessageExt] | None:
    messages = await found
    return messages if len(messages) == count else None


def test_source_reads_a_dead_letter_topic_named_explicitly(spark: SparkSession, delayed: SparkCluster) -> None:
    broker = delayed.brokers["broker-a"].address

    async def dead_letter() -> None:
        client = RemotingClient(request_timeout_s=10)
        try:
            await send(client, broker, "SparkDeadSource", b"dead on arrival")
            [message] = await pull_all(client, broker, "SparkDeadSource", 0)
            header = ConsumerSendMsgBackRequestHeader(
                offset=message.commit_log_offset, group="spark_dlq", delay_level=-1
            )
            await send_back(client, broker, header)
        finally:
            await client.close()

    asyncio.run(dead_letter())
    bodies = asyncio.run(eventually(lambda: read_bodies(spark, delayed, "%DLQ%spark_dlq"), what="a route"))
    assert bodies == ["dead on arrival"]


def test_rows_of_each_delay_level_get_producer_batches_of_their_own() -> None:
    options = parse_sink({"nameserver": "127.0.0.1:9876", "topic": "T", "delayLevel": "2"})
    queues = [MessageQueue("T", "broker-a", 0)]
    levels = pa.array([0, None, 3, 0], pa.int32())
    batch = pa.record_batch({"body": pa.array([b"a", b"b", b"c", b"d"]), "delayLevel": levels})
    outgoing = split_batch(batch, options, RowPlace(None, 0), lambda topic: queues, 1024)
    assert {o.delay_level: o.batch.column("body").to_pylist() for o in outgoing} == {
        0: [b"a", b"d"],
        2: [b"b"],  # null: the option's level
        3: [b"c"],
    }
    negative = pa.record_batch({"body": pa.array([b"a"]), "delayLevel": pa.array([-1], pa.int32())})
    with pytest.raises(ValidationError, match="row 0 has delayLevel -1"):
        split_batch(negative, options, RowPlace(None, 0), lambda topic: queues, 1024)
