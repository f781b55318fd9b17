"""The Spark sink with brokers that go away, brokers without the Arrow send, and Apache RocketMQ's
own client reading what Spark wrote."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, MapType, StringType, StructField, StructType

from rocketspark import Producer
from rocketspark.client.api import offset
from rocketspark.client.producer.queue_selector import select_by_key
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.interop.driver import RealClient
from tests.spark.cluster import Brokers, SparkCluster
from tests.spark.queries import QUERY_TIMEOUT_S, needs_admission_control, stream, wait_for

#: a loaded test machine can stall a broker for more than the default 200 ms a send may wait in its
#: queue (it then answers SYSTEM_BUSY, and a write fails after its retries): not what these tests test
PATIENT_SENDS = ("--set", "waitTimeMillsInSendQueue=5000")

#: the columns these tests write
WRITTEN = StructType(
    [
        StructField("body", StringType()),
        StructField("tags", StringType()),
        StructField("keys", ArrayType(StringType())),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("shardingKey", StringType()),
    ]
)


def read_topic(spark: SparkSession, cluster: SparkCluster, topic: str) -> DataFrame:
    return spark.read.format("rocketmq").option("nameserver", cluster.namesrv_addr).option("topic", topic).load()


def stored_on(cluster: SparkCluster, broker_name: str, topic: str, queues: int) -> int:
    """Messages the broker holds in the topic's queues (the sum of their max offsets)."""

    async def ask() -> int:
        client = RemotingClient()
        try:
            address = cluster.brokers[broker_name].address
            return sum([await offset.get_max_offset(client, address, topic, q) for q in range(queues)])
        finally:
            await client.close()

    return asyncio.run(ask())


def fill(cluster: SparkCluster, topic: str, count: int) -> list[str]:
    """`count` messages with distinct bodies, sent as Arrow batches; returns the bodies."""
    bodies = [f"{topic} row {i}" for i in range(count)]
    with Producer(f"{topic}_filler", namesrv_addr=cluster.namesrv_addr) as producer:
        for start in range(0, count, 1_000):
            producer.send_arrow(pa.table({"body": [b.encode() for b in bodies[start : start + 1_000]]}), topic)
    return bodies


@pytest.mark.slow
@pytest.mark.timeout(2 * QUERY_TIMEOUT_S + 120)
@pytest.mark.parametrize("placement", ["round-robin", "sharding-key"])
@needs_admission_control
def test_every_row_is_in_the_topic_after_a_broker_is_killed_mid_write(
    spark: SparkSession, servers: ServerFactory, tmp_path: Path, placement: str
) -> None:
    """A stream from a topic of broker-a into a topic of both brokers, written at-least-once
    (`idempotentWrites=false`); broker-b is killed (kill -9) once it holds the first written rows.
    Round robin sends to broker-b fail over to broker-a; rows whose sharding key hashes to a queue of
    broker-b cannot move, so the query fails after `sendTimeoutMs` (unless the producers' routes
    dropped broker-b first). broker-b comes back on another port; the query run again from its
    checkpoint must not send to the old one. Then every input row is in the topic.
    (tests/spark/test_exactly_once.py kills a broker under an exactly-once write.)"""
    brokers = Brokers(servers, tmp_path, *PATIENT_SENDS)
    cluster = brokers.cluster
    cluster.create_topic("KillIn", queues=2, on=("broker-a",))
    cluster.create_topic("KillOut", queues=4)
    total = 12_000
    bodies = fill(cluster, "KillIn", total)
    checkpoint = tmp_path / "ckpt"

    def start():  # type: ignore[no-untyped-def]
        frame = stream(
            spark, cluster, "KillIn", "kill_in_group", startingOffsets="earliest", maxMessagesPerTrigger="1000"
        )
        if placement == "sharding-key":  # 50 keys: every queue of both brokers has some
            frame = frame.withColumn("shardingKey", F.concat(F.lit("k"), (F.col("queueOffset") % 50).cast("string")))
        writer = frame.select("body", *(["shardingKey"] if placement == "sharding-key" else []))
        writer = writer.writeStream.format("rocketmq").option("nameserver", cluster.namesrv_addr)
        writer = writer.option("topic", "KillOut").option("checkpointLocation", str(checkpoint))
        writer = writer.option("idempotentWrites", "false").option("sendTimeoutMs", "5000")
        return writer.trigger(availableNow=True).start()

    query = start()
    try:
        wait_for(lambda: stored_on(cluster, "broker-b", "KillOut", 4) > 0, "the first rows on broker-b", 120)
        written_by_then = sum(stored_on(cluster, name, "KillOut", 4) for name in ("broker-a", "broker-b"))
        assert query.isActive and written_by_then < total, "the write ended before broker-b was killed"
        cluster.brokers["broker-b"].kill()
        try:
            finished = query.awaitTermination(QUERY_TIMEOUT_S)
        except Exception:  # the query failed on a send to broker-b; its restart sends the batch again
            finished = True
        assert finished, "the query neither finished nor failed after broker-b was killed"
    finally:
        query.stop()
    if placement == "round-robin":
        assert query.exception() is None  # the producer's retries went to broker-a

    brokers.restart_b()
    wait_for(lambda: brokers.queue_count("KillOut", "broker-b") == 4, "broker-b back in the route")
    rerun = start()
    try:
        assert rerun.awaitTermination(QUERY_TIMEOUT_S), "the query restarted from its checkpoint did not finish"
    finally:
        rerun.stop()
    assert rerun.exception() is None

    stored = [r.body.decode() for r in read_topic(spark, cluster, "KillOut").select("body").collect()]
    assert set(stored) == set(bodies)  # every row at least once, and nothing else
    assert stored_on(cluster, "broker-b", "KillOut", 4) > 0  # broker-b's rows from before the kill are still there


@pytest.mark.slow
@pytest.mark.interop
def test_a_topic_written_by_spark_is_consumed_by_the_real_rocketmq_client(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path
) -> None:
    """Apache RocketMQ's own client (a push consumer) gets the bodies, tags, keys and user
    properties Spark wrote."""
    topic = "ToRealClient"
    two_brokers.create_topic(topic, queues=2)
    rows = [
        (f"spark row {i}", f"Tag{i % 3}", [f"key-{i}", f"alt-{i}"], {"seq": str(i), "origin": "spark"}, None)
        for i in range(60)
    ]
    frame = spark.createDataFrame(rows, WRITTEN).drop("shardingKey")
    frame.write.format("rocketmq").mode("append").option("nameserver", two_brokers.namesrv_addr).option(
        "topic", topic
    ).save()

    home = tmp_path / "client-home"
    home.mkdir()
    client = RealClient(two_brokers.namesrv_addr, home, [two_brokers.namesrv, *two_brokers.brokers.values()])
    try:
        consumed = client.consume("real_reader_group", topic, expect=len(rows), properties=["seq", "origin"])
    finally:
        client.close()
    assert consumed.expected_reached, client.diagnostics()
    got = sorted((m.body, m.tags, m.keys, m.properties["seq"], m.properties["origin"]) for m in consumed.messages)
    assert got == sorted((body, tags, " ".join(keys), p["seq"], p["origin"]) for body, tags, keys, p, _ in rows)
    assert {m.topic for m in consumed.messages} == {topic}


#: broker flags of each kind of send: Arrow, standard, and standard to brokers of flavor=apache
SEND_KINDS = {"arrow": (), "standard": ("--set", "arrowEnable=false"), "apache": ("--set", "flavor=apache")}


@pytest.fixture(params=list(SEND_KINDS))
def send_kind_cluster(request: pytest.FixtureRequest, servers: ServerFactory) -> tuple[str, SparkCluster]:
    """broker-a and broker-b that take Arrow sends, both with the Arrow codes turned off, or both of
    flavor=apache (no Arrow codes, no duplicate window)."""
    namesrv = servers.namesrv()
    extra = (*PATIENT_SENDS, *SEND_KINDS[request.param])
    cluster = SparkCluster(namesrv, servers.brokers(namesrv.address, ("broker-a", "broker-b"), *extra))
    return request.param, cluster


@pytest.mark.slow
def test_write_keeps_tags_keys_properties_and_key_placement_with_or_without_arrow_sends(
    spark: SparkSession, send_kind_cluster: tuple[str, SparkCluster]
) -> None:
    """Without the Arrow send (arrowEnable=false, or a broker of flavor=apache) the producer falls
    back to standard batch sends: what is stored, and where, is the same."""
    kind, cluster = send_kind_cluster
    topic = "SendKinds"
    cluster.create_topic(topic, queues=3)
    rows = [
        (
            f"row {i}",
            f"T{i % 4}" if i % 5 else None,
            [f"key-{i}"] if i % 2 else [f"key-{i}", f"other-{i}"],
            {"seq": str(i), "kind": "even" if i % 2 == 0 else "odd"},
            f"user-{i % 7}" if i % 6 else None,  # a sixth of the rows go round robin
        )
        for i in range(300)
    ]
    before = cluster.runtime_counters()
    frame = spark.createDataFrame(rows, WRITTEN).coalesce(1)  # one task: rows of a key in their order
    writer = (
        frame.write.format("rocketmq").mode("append").option("nameserver", cluster.namesrv_addr).option("topic", topic)
    )
    writer.option("batchSize", "16").save()
    after = cluster.runtime_counters()
    used = {k: after.get(k, 0) - before.get(k, 0) for k in ("arrowSendMessages", "standardSendMessages")}
    assert used == (
        {"arrowSendMessages": 300, "standardSendMessages": 0}
        if kind == "arrow"
        else {
            "arrowSendMessages": 0,
            "standardSendMessages": 300,
        }
    )

    stored = read_topic(spark, cluster, topic).collect()
    assert sorted(
        (r.body.decode(), r.tags, r.keys, r.properties["seq"], r.properties["kind"]) for r in stored
    ) == sorted((body, tags, " ".join(keys), p["seq"], p["kind"]) for body, tags, keys, p, _ in rows)
    by_body = {r.body.decode(): r for r in stored}
    with Producer("send_kinds_probe", namesrv_addr=cluster.namesrv_addr) as producer:
        queues = producer.fetch_publish_queues(topic)
    assert len(queues) == 6
    for key in {k for *_, k in rows if k is not None}:
        mine = [by_body[body] for body, *_, k in rows if k == key]  # in the order written
        expected = select_by_key(queues, key)
        assert {(r.brokerName, r.queueId) for r in mine} == {(expected.broker_name, expected.queue_id)}, key
        assert [r.queueOffset for r in mine] == sorted(r.queueOffset for r in mine), key
    spread = {(by_body[body].brokerName, by_body[body].queueId) for body, *_, k in rows if k is None}
    assert len(spread) > 1  # rows without a key are not all in one queue
