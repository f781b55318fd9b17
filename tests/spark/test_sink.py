"""The Spark sink end to end: real Spark writes to brokers started as subprocesses, read back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from rocketspark import Producer
from rocketspark.client.producer.queue_selector import select_by_key
from rocketspark.protocol.queue import MessageQueue
from tests.harness import ServerFactory
from tests.spark.cluster import SparkCluster


def read_topic(spark: SparkSession, cluster: SparkCluster, topic: str) -> DataFrame:
    return spark.read.format("rocketmq").option("nameserver", cluster.namesrv_addr).option("topic", topic).load()


def write(frame: DataFrame, namesrv: str, **options: str) -> None:
    writer = frame.write.format("rocketmq").option("nameserver", namesrv).mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def publish_queues(cluster: SparkCluster, topic: str) -> list[MessageQueue]:
    with Producer(f"{topic}_probe", namesrv_addr=cluster.namesrv_addr) as producer:
        return producer.fetch_publish_queues(topic)


@contextmanager
def arrow_batches_of(spark: SparkSession, rows: int) -> Iterator[None]:
    """Spark hands Python writers Arrow batches of at most `rows` rows meanwhile."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, str(rows))
    try:
        yield
    finally:
        spark.conf.set(key, before)


@pytest.mark.slow
def test_rate_stream_into_a_topic_is_read_back_completely(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path
) -> None:
    two_brokers.create_topic("RateOut")
    rate = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", "300").option("numPartitions", "3")
    frame = rate.load().select(F.col("value").cast("string").alias("body"), F.lit("rate").alias("tags"))
    written = 0
    for _ in range(2):  # the second run continues from the first one's checkpoint
        query = (
            frame.writeStream.format("rocketmq")
            .option("nameserver", two_brokers.namesrv_addr)
            .option("topic", "RateOut")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(180)
        batches = [p for p in query.recentProgress if p["numInputRows"]]
        assert [p["sink"]["numOutputRows"] for p in batches] == [p["numInputRows"] for p in batches]
        written += sum(p["sink"]["numOutputRows"] for p in batches)
    assert written >= 600
    stored = read_topic(spark, two_brokers, "RateOut")
    assert stored.filter(F.col("tags") != "rate").count() == 0
    expected = spark.range(written).select(F.col("id").cast("string").alias("body"))
    assert_df_equality(stored.select(F.col("body").cast("string").alias("body")), expected, ignore_row_order=True)


def test_batch_write_keeps_bodies_tags_keys_and_properties(spark: SparkSession, two_brokers: SparkCluster) -> None:
    two_brokers.create_topic("Described")
    rows = [
        (f"order {i}".encode(), "created" if i % 2 else None, [f"order-{i}", f"user-{i % 3}"], {"seq": str(i)})
        for i in range(40)
    ]
    rows[5] = (rows[5][0], "paid", [], {"seq": "5", "TAGS": "ignored", "UNIQ_KEY": "ignored", "KEYS": "ignored"})
    frame = spark.createDataFrame(rows, "body binary, tags string, keys array<string>, properties map<string,string>")
    write(frame, two_brokers.namesrv_addr, topic="Described")
    # an array Spark builds from non-null strings has non-nullable elements
    built = spark.range(3).select(
        F.col("id").cast("string").alias("body"), F.array(F.lit("k"), F.lit("j")).alias("keys")
    )
    write(built, two_brokers.namesrv_addr, topic="Described")
    assert (
        sorted(r.keys for r in read_topic(spark, two_brokers, "Described").filter(F.length("body") == 1).collect())
        == ["k j"] * 3
    )
    stored = {
        bytes(r.body): (r.tags, r.keys, r.properties)  # PySpark 4.0 collects binary as bytearray
        for r in read_topic(spark, two_brokers, "Described").select("body", "tags", "keys", "properties").collect()
    }
    assert len(stored) == 43
    for body, tags, keys, properties in rows:
        got_tags, got_keys, got_properties = stored[body]
        assert got_tags == tags and got_keys == (" ".join(keys) or None)
        assert got_properties["seq"] == properties["seq"] and "ignored" not in got_properties.values()


@pytest.mark.slow
def test_rows_of_one_sharding_key_go_to_its_queue_in_order(spark: SparkSession, two_brokers: SparkCluster) -> None:
    two_brokers.create_topic("Sharded")
    rows = [(f"order-{i % 7}", i) for i in range(600)]
    frame = spark.createDataFrame(rows, "shardingKey string, seq int").coalesce(1)
    frame = frame.select("shardingKey", F.concat_ws(":", "shardingKey", F.col("seq").cast("string")).alias("body"))
    with arrow_batches_of(spark, 64):  # order must hold across Spark's Arrow batches and many requests
        write(frame, two_brokers.namesrv_addr, topic="Sharded", batchSize="16")
    queues = publish_queues(two_brokers, "Sharded")
    stored = read_topic(spark, two_brokers, "Sharded").select("brokerName", "queueId", "queueOffset", "body")
    placed: dict[str, list[tuple[str, int, int, int]]] = {}
    for row in stored.collect():
        key, seq = row.body.decode().split(":")
        placed.setdefault(key, []).append((row.brokerName, row.queueId, row.queueOffset, int(seq)))
    assert sum(len(v) for v in placed.values()) == 600
    for key, entries in placed.items():
        expected = select_by_key(queues, key)
        assert {(b, q) for b, q, _, _ in entries} == {(expected.broker_name, expected.queue_id)}, key
        by_offset = [seq for _, _, _, seq in sorted(entries, key=lambda e: e[2])]
        assert by_offset == sorted(by_offset), f"rows of {key} out of order"


def test_rows_without_a_key_spread_over_all_queues(spark: SparkSession, two_brokers: SparkCluster) -> None:
    two_brokers.create_topic("Spread8")
    frame = spark.range(800).select(F.col("id").cast("string").alias("body")).coalesce(2)
    write(frame, two_brokers.namesrv_addr, topic="Spread8", batchSize="25")
    counts = {
        (r.brokerName, r.queueId): r["count"]
        for r in read_topic(spark, two_brokers, "Spread8").groupBy("brokerName", "queueId").count().collect()
    }
    assert set(counts) == {(b, q) for b in ("broker-a", "broker-b") for q in range(4)}
    assert sum(counts.values()) == 800


def test_queue_id_picks_a_queue_of_the_topic(spark: SparkSession, two_brokers: SparkCluster) -> None:
    two_brokers.create_topic("Picked")
    frame = spark.range(64).select(F.col("id").cast("string").alias("body"), (F.col("id") % 8).alias("queueId"))
    write(frame, two_brokers.namesrv_addr, topic="Picked")
    queues = publish_queues(two_brokers, "Picked")
    for row in read_topic(spark, two_brokers, "Picked").collect():
        assert queues[int(row.body.decode()) % 8] == MessageQueue("Picked", row.brokerName, row.queueId)


def test_the_source_output_written_back_reads_the_same(spark: SparkSession, two_brokers: SparkCluster) -> None:
    two_brokers.create_topic("RoundTripIn")
    two_brokers.create_topic("RoundTripOut")
    sent = two_brokers.produce("RoundTripIn", 48)
    source = read_topic(spark, two_brokers, "RoundTripIn")
    write(source.select("topic", "body", "tags", "keys", "properties"), two_brokers.namesrv_addr, topic="RoundTripOut")
    again = read_topic(spark, two_brokers, "RoundTripOut").collect()
    assert {r.topic for r in again} == {"RoundTripOut"}
    assert sorted((r.body, r.tags, r.keys, r.properties["seq"]) for r in again) == sorted(
        (body, tag, keys, str(i)) for i, (_, _, _, _, _, tag, keys, body) in enumerate(sent)
    )


def test_a_topic_column_sends_each_row_to_its_topic(spark: SparkSession, two_brokers: SparkCluster) -> None:
    for topic in ("Left", "Right"):
        two_brokers.create_topic(topic)
    rows = [("Left" if i % 3 else "Right", f"row {i}") for i in range(30)]
    write(spark.createDataFrame(rows, "topic string, body string"), two_brokers.namesrv_addr)
    for topic in ("Left", "Right"):
        bodies = sorted(r.body.decode() for r in read_topic(spark, two_brokers, topic).collect())
        assert bodies == sorted(body for t, body in rows if t == topic)


def test_write_errors_name_what_is_wrong(spark: SparkSession, two_brokers: SparkCluster) -> None:
    two_brokers.create_topic("Refused")
    ns = two_brokers.namesrv_addr
    source_rows = read_topic(spark, two_brokers, "Refused")
    with pytest.raises(
        Exception, match=r"cannot write the columns brokerName, queueOffset.*it writes the columns body"
    ):
        write(source_rows.select("body", "brokerName", "queueOffset"), ns, topic="Refused")
    bodies = spark.createDataFrame([("a",), (None,), ("c",)], "body string").coalesce(1)
    with pytest.raises(Exception, match="overwrite is not supported"):
        bodies.write.format("rocketmq").option("nameserver", ns).option("topic", "Refused").mode("overwrite").save()
    with pytest.raises(Exception, match="unknown option sendtimeout for format rocketmq"):
        write(bodies, ns, topic="Refused", sendTimeout="5")
    with pytest.raises(Exception, match="needs a topic to write to"):
        write(bodies, ns)
    with pytest.raises(Exception, match="row 1 of partition 0 has a null body"):
        write(bodies, ns, topic="Refused")
    huge = spark.createDataFrame([(b"x" * (4 * 1024 * 1024 + 1),)], "body binary")
    with pytest.raises(Exception, match=r"over the broker's maximum message size of 4,194,304 bytes"):
        write(huge, ns, topic="Refused")
    with pytest.raises(Exception, match=r"no name server answered \(127\.0\.0\.1:9: "):
        write(bodies, "127.0.0.1:9", topic="Refused")


def test_a_topic_that_does_not_exist_is_refused_before_anything_is_sent(
    spark: SparkSession, servers: ServerFactory
) -> None:
    namesrv = servers.namesrv()
    servers.broker(namesrv.address, "--set", "autoCreateTopicEnable=false")
    frame = spark.createDataFrame([("a",)], "body string")
    with pytest.raises(Exception, match="topic Missing does not exist and no broker creates topics automatically"):
        write(frame, namesrv.address, topic="Missing")
