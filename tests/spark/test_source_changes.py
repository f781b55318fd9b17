"""The Spark source while the cluster changes under it: queues added and removed, new topics, retention,
a broker restarting."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from rocketspark.client.api import admin, offset
from rocketspark.client.api.route import get_route
from rocketspark.client.consumer.allocation import averagely_by_index
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.spark.cluster import Brokers, Row, SparkCluster, ends_of
from tests.spark.queries import needs_admission_control, run_available_now, start_stream, stored_rows, stream, wait_for

#: broker settings under which a closed commit-log segment expires about a second after its last write
FAST_RETENTION = (
    "--set",
    "mappedFileSizeCommitLog=4096",
    "--set",
    "fileReservedTime=0.0003",
    "--set",
    "deleteWhen=*",
    "--set",
    "cleanResourceInterval=200",
)


def read_queue_count(cluster: SparkCluster, topic: str, broker_name: str) -> int:
    async def ask() -> int:
        client = RemotingClient()
        try:
            route = await get_route(client, cluster.namesrv_addr, topic)
        finally:
            await client.close()
        return next((q.read_queue_nums for q in route.queue_datas if q.broker_name == broker_name), 0)

    return asyncio.run(ask())


def min_offset(cluster: SparkCluster, broker_name: str, topic: str, queue_id: int) -> int:
    async def ask() -> int:
        client = RemotingClient()
        try:
            return await offset.get_min_offset(client, cluster.brokers[broker_name].address, topic, queue_id)
        finally:
            await client.close()

    return asyncio.run(ask())


def delete_topic(cluster: SparkCluster, topic: str) -> None:
    """Delete `topic` from every broker (its queues and consumer offsets) and from the name server."""

    async def delete() -> None:
        client = RemotingClient()
        try:
            for broker in cluster.brokers.values():
                await admin.delete_topic_in_broker(client, broker.address, topic)
            await admin.delete_topic_in_namesrv(client, cluster.namesrv_addr, topic)
        finally:
            await client.close()

    asyncio.run(delete())


def test_partitions_follow_average_allocation(spark: SparkSession, two_brokers: SparkCluster) -> None:
    two_brokers.create_topic("Spread")
    two_brokers.produce("Spread", 80)
    frame = (
        spark.read.format("rocketmq")
        .option("nameserver", two_brokers.namesrv_addr)
        .option("topic", "Spread")
        .option("numPartitions", "3")
        .load()
        .withColumn("partition", F.spark_partition_id())
    )
    placed = {
        (r.brokerName, r.queueId, r.partition) for r in frame.select("brokerName", "queueId", "partition").collect()
    }
    queues = sorted(MessageQueue("Spread", b, q) for b in ("broker-a", "broker-b") for q in range(4))
    expected = {(q.broker_name, q.queue_id, i) for i in range(3) for q in averagely_by_index(queues, i, 3)}
    assert placed == expected


@pytest.mark.slow
@needs_admission_control  # queues first seen are read by the next batch
def test_queues_added_by_scale_out_are_read_from_their_earliest_offset(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path
) -> None:
    two_brokers.create_topic("ScaledOut", queues=2)
    sent = two_brokers.produce("ScaledOut", 20)
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"

    def run() -> None:
        frame = stream(spark, two_brokers, "ScaledOut", "scaled_group", startingOffsets="earliest")
        run_available_now(frame, "parquet", checkpoint, path=str(output))

    run()
    two_brokers.create_topic("ScaledOut", queues=4)
    wait_for(lambda: read_queue_count(two_brokers, "ScaledOut", "broker-b") == 4, "the route to list 4 queues")
    sent += two_brokers.produce("ScaledOut", 40, first=20)
    assert {row[2] for row in sent} == {0, 1, 2, 3}
    run()
    read = spark.read.parquet(str(output)).select("msgId").collect()
    assert sorted(r.msgId for r in read) == sorted(row[4] for row in sent)


@pytest.mark.slow
def test_topic_that_starts_to_match_the_pattern_is_read_from_its_earliest_offset(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path
) -> None:
    two_brokers.create_topic("LateOne", queues=1)
    two_brokers.produce("LateOne", 6)
    frame = (
        spark.readStream.format("rocketmq")
        .option("nameserver", two_brokers.namesrv_addr)
        .option("topicPattern", "Late.*")
        .option("consumerGroup", "late_group")
        .option("startingOffsets", "earliest")
        .load()
    )
    query = (
        frame.writeStream.format("memory")
        .queryName("late")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: spark.table("late").count() == 6, "LateOne's 6 messages")
        two_brokers.create_topic("LateTwo", queues=1)
        two_brokers.produce("LateTwo", 4)  # sent before the query sees the topic: still read
        wait_for(lambda: spark.table("late").count() == 10, "LateTwo's 4 messages")
    finally:
        query.stop()
    counts = {r.topic: r["count"] for r in spark.table("late").groupBy("topic").count().collect()}
    assert counts == {"LateOne": 6, "LateTwo": 4}


@pytest.mark.slow
def test_queues_gone_from_the_route_are_data_loss_unless_allowed(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path
) -> None:
    two_brokers.create_topic("Shrunk")
    two_brokers.produce("Shrunk", 40)
    checkpoint, output = tmp_path / "ckpt", tmp_path / "out"

    def run(*, expect_error: bool = False, **options: str):  # type: ignore[no-untyped-def]
        frame = stream(spark, two_brokers, "Shrunk", "shrunk_group", startingOffsets="earliest", **options)
        return run_available_now(frame, "parquet", checkpoint, path=str(output), expect_error=expect_error)

    run()
    two_brokers.create_topic("Shrunk", queues=2, on=("broker-a",))
    wait_for(lambda: read_queue_count(two_brokers, "Shrunk", "broker-a") == 2, "the route to list 2 queues")
    later = two_brokers.produce("Shrunk", 12, first=40)

    error = str(run(expect_error=True).exception())
    assert "topic Shrunk, broker broker-a, queue 2 (the query is at offset 5)" in error, error
    assert "set failOnDataLoss=false" in error

    run(failOnDataLoss="false")
    stored = spark.read.parquet(str(output))
    assert stored.count() == 52
    assert {r.msgId for r in stored.filter(F.col("queueOffset") >= 5).collect()} == {row[4] for row in later}


def group_at(cluster: SparkCluster, group: str, topic: str, rows: list[Row]) -> bool:
    """Whether the group's offsets are at the ends of `rows`: the query has processed every batch up to them."""
    return cluster.group_offsets(group, topic) == ends_of(rows)


def read_on_after_recreation(cluster: SparkCluster, group: str, topic: str, recreated: list[Row]) -> list[Row]:
    """With a query running on `topic` created again with `recreated` (40 a queue): its group's offsets come
    back to 40 a queue, then follow 685 more messages past the old offsets (125 or 126 a queue). Returns
    every message of the new topic."""
    wait_for(lambda: group_at(cluster, group, topic, recreated), "the group's offsets back at 40 a queue")
    later = cluster.produce(topic, 685, first=320)
    wait_for(lambda: group_at(cluster, group, topic, recreated + later), "the group's offsets at the queues' ends")
    return recreated + later


def stored_ids(spark: SparkSession, output: Path) -> list[str]:
    return sorted(r.msgId for r in spark.read.parquet(str(output)).select("msgId").collect())


@pytest.mark.slow
def test_a_topic_created_again_while_the_query_is_stopped_is_read_from_its_first_offset(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path
) -> None:
    """The topic's 8 queues start over at 0 below the checkpoint's 100: failOnDataLoss=true fails naming
    the queues; false reads every message of the new topic once, and the group's offsets follow it back."""
    two_brokers.create_topic("Reborn")
    sent = two_brokers.produce("Reborn", 800)  # 100 a queue
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"

    def frame(**options: str):  # type: ignore[no-untyped-def]
        return stream(spark, two_brokers, "Reborn", "reborn_group", startingOffsets="earliest", **options)

    run_available_now(frame(), "parquet", checkpoint, path=str(output))
    delete_topic(two_brokers, "Reborn")
    two_brokers.create_topic("Reborn")
    recreated = two_brokers.produce("Reborn", 320)  # 40 a queue
    assert set(ends_of(recreated).values()) == {40}

    error = str(run_available_now(frame(), "parquet", checkpoint, path=str(output), expect_error=True).exception())
    assert "topic Reborn, broker broker-a, queue 0 ends at offset 40 but the query is at 100" in error, error
    assert "topic Reborn, broker broker-b, queue 3" in error and "set failOnDataLoss=false" in error

    query = start_stream(frame(failOnDataLoss="false"), output, checkpoint)
    try:
        new = read_on_after_recreation(two_brokers, "reborn_group", "Reborn", recreated)
        assert query.isActive, query.exception()
    finally:
        query.stop()
    # every batch up to the queues' ends is in the sink (their ends are mirrored only once processed)
    assert stored_ids(spark, output) == sorted(row[4] for row in sent + new)


@pytest.mark.slow
@pytest.mark.parametrize("seen_gone", [False, True], ids=["between_triggers", "seen_gone"])
def test_a_topic_created_again_under_a_running_query_is_read_from_its_first_offset(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path, seen_gone: bool
) -> None:
    """Deleted and created again under a running query (failOnDataLoss=false): between two triggers
    (a trigger finds the queues below the query's offsets), or with a batch planned while the topic is
    gone (its queues are dropped, then placed as new ones). Either way every message of the new topic
    is read once, and the group's offsets follow the queues back."""
    topic, group = f"RebornLive{int(seen_gone)}", f"reborn_live_group{int(seen_gone)}"
    two_brokers.create_topic(topic)
    sent = two_brokers.produce(topic, 800)  # 100 a queue
    output = tmp_path / "out"
    frame = stream(spark, two_brokers, topic, group, startingOffsets="earliest", failOnDataLoss="false")
    query = start_stream(frame, output, tmp_path / "ckpt")
    try:
        wait_for(lambda: group_at(two_brokers, group, topic, sent), "the group's offsets at 100 a queue")
        before = query.lastProgress["batchId"]
        delete_topic(two_brokers, topic)
        if seen_gone:

            def planned_without_the_topic() -> bool:
                batches = [p for p in query.recentProgress if p["batchId"] > before and p["numInputRows"] == 0]
                return any(topic not in json.loads(p["sources"][0]["endOffset"] or "{}") for p in batches)

            wait_for(planned_without_the_topic, "a batch planned without the deleted topic's queues")
        two_brokers.create_topic(topic)
        new = read_on_after_recreation(two_brokers, group, topic, two_brokers.produce(topic, 320))
        assert query.isActive, query.exception()
    finally:
        query.stop()
    assert stored_ids(spark, output) == sorted(row[4] for row in sent + new)


@pytest.mark.slow
def test_messages_removed_by_retention_are_data_loss_unless_allowed(
    spark: SparkSession, servers: ServerFactory
) -> None:
    namesrv = servers.namesrv()
    cluster = SparkCluster(namesrv, {"broker-a": servers.broker(namesrv.address, *FAST_RETENTION)})
    cluster.create_topic("Retained", queues=1)
    cluster.produce("Retained", 60)
    wait_for(lambda: min_offset(cluster, "broker-a", "Retained", 0) > 0, "retention to remove a segment", 30)
    low = min_offset(cluster, "broker-a", "Retained", 0)

    def read(**options: str) -> int:
        reader = spark.read.format("rocketmq").option("nameserver", cluster.namesrv_addr).option("topic", "Retained")
        reader = reader.option("startingOffsets", json.dumps({"Retained": {"broker-a": {"0": 0}}}))
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load().count()

    with pytest.raises(Exception, match=r"topic Retained, broker broker-a, queue 0 at offsets 0\.\.\d+ are gone"):
        read()
    assert read(failOnDataLoss="false") == 60 - min_offset(cluster, "broker-a", "Retained", 0)
    assert low <= min_offset(cluster, "broker-a", "Retained", 0) < 60


@pytest.mark.slow
@pytest.mark.parametrize("how", ["stopped", "killed"])
def test_query_waits_for_a_restarting_broker_and_loses_nothing(
    spark: SparkSession, brokers: Brokers, tmp_path: Path, how: str
) -> None:
    """broker-b stops (SIGTERM: it unregisters, then closes) or is killed (kill -9: the name server
    notices the closed connection) under a running stream, and comes back on another port."""
    cluster = brokers.cluster
    cluster.create_topic("Restarted", queues=2)
    sent = cluster.produce("Restarted", 20)
    output = tmp_path / "out"
    query = start_stream(
        stream(spark, cluster, "Restarted", "restarted_group", startingOffsets="earliest"), output, tmp_path / "ckpt"
    )
    try:
        wait_for(lambda: stored_rows(spark, output) >= 20, "the first 20 messages")
        if how == "stopped":
            cluster.brokers["broker-b"].stop()
        else:
            cluster.brokers["broker-b"].kill()
        sent += cluster.produce("Restarted", 10, first=20, on=("broker-a",))
        wait_for(lambda: stored_rows(spark, output) >= 30, "messages sent while broker-b is down")
        assert query.isActive, query.exception()
        brokers.restart_b()
        wait_for(lambda: read_queue_count(cluster, "Restarted", "broker-b") == 2, "broker-b to come back")
        sent += cluster.produce("Restarted", 20, first=30)
        wait_for(lambda: stored_rows(spark, output) >= 50, "messages sent after the restart")
        assert query.isActive, query.exception()
        wait_for(lambda: cluster.group_offsets("restarted_group", "Restarted", 2) == ends_of(sent), "group offsets")
    finally:
        query.stop()
    read = spark.read.parquet(str(output)).select("msgId").collect()
    assert sorted(r.msgId for r in read) == sorted(row[4] for row in sent)
