"""Exactly-once writes: a stream from a topic through the sink into another topic stores every input
row once, whatever fails in between (a task, the query, a broker), because the sink's ids are
deterministic and the brokers' duplicate windows (on by default, 600 s) drop a resent row."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from rocketspark.spark import versions
from tests.harness import ServerFactory
from tests.spark.cluster import Brokers, SparkCluster
from tests.spark.queries import (
    QUERY_TIMEOUT_S,
    forget_last_commit,
    needs_admission_control,
    newest,
    rows_reach_the_sink_as_made,
    stream,
    wait_for,
)
from tests.spark.test_sink_brokers import PATIENT_SENDS, fill, stored_on


def output_bodies(spark: SparkSession, cluster: SparkCluster, topic: str) -> Counter[str]:
    frame = spark.read.format("rocketmq").option("nameserver", cluster.namesrv_addr).option("topic", topic).load()
    return Counter(bytes(row.body).decode() for row in frame.select("body").collect())


def stored(cluster: SparkCluster, topic: str) -> int:
    return sum(stored_on(cluster, name, topic, 4) for name in cluster.brokers)


def start_copy(
    spark: SparkSession,
    cluster: SparkCluster,
    source: str,
    target: str,
    checkpoint: Path,
    per_trigger: int,
    **sink: str,
) -> StreamingQuery:
    """Copy `source` into `target` with AvailableNow, `per_trigger` messages a micro-batch (before
    PySpark 4.2, which has no trigger limits for the source, one batch)."""
    limits = {"maxMessagesPerTrigger": str(per_trigger)} if versions.has(versions.ADMISSION_CONTROL) else {}
    frame = stream(spark, cluster, source, f"{source}_copier", startingOffsets="earliest", **limits)
    writer = frame.select("body").writeStream.format("rocketmq").option("nameserver", cluster.namesrv_addr)
    writer = writer.option("topic", target).option("checkpointLocation", str(checkpoint))
    for key, value in sink.items():
        writer = writer.option(key, value)
    return writer.trigger(availableNow=True).start()


def finish(query: StreamingQuery) -> None:
    try:
        assert query.awaitTermination(QUERY_TIMEOUT_S), "the query did not finish"
    finally:
        query.stop()
    assert query.exception() is None


@pytest.fixture
def small_arrow_batches(spark: SparkSession) -> Iterator[None]:
    """The sink gets its rows 50 at a time as they are made, so a task sends some before it fails."""
    with rows_reach_the_sink_as_made(spark, 50):
        yield


@pytest.mark.slow
@pytest.mark.usefixtures("small_arrow_batches")
def test_a_task_that_fails_after_sending_some_rows_is_run_again_without_duplicates(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path
) -> None:
    """A UDF fails the first attempt of one task at its 600th row, usually after the sink sent
    earlier rows of that task. Spark fails the batch (local mode does not retry tasks); the query run again from
    its checkpoint computes the batch again, and every input row is in the output once."""
    two_brokers.create_topic("OnceUdfIn", queues=2, on=("broker-a",))
    two_brokers.create_topic("OnceUdfOut")
    bodies = fill(two_brokers, "OnceUdfIn", 2_000)
    marker = str(tmp_path / "failed-once")
    doomed = bodies[600]  # in the first queue's task: fill sends its rows round robin by 1,000

    @F.udf("string")
    def fails_once(body: str) -> str:
        if body == doomed and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("the first attempt of this task fails here")
        return body

    checkpoint = tmp_path / "ckpt"
    frame = stream(spark, two_brokers, "OnceUdfIn", "udf_copier", startingOffsets="earliest")
    writer = frame.select(fails_once(F.col("body").cast("string")).alias("body")).writeStream.format("rocketmq")
    writer = writer.option("nameserver", two_brokers.namesrv_addr).option("topic", "OnceUdfOut")
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    with pytest.raises(Exception, match="first attempt of this task fails"):
        query.awaitTermination(QUERY_TIMEOUT_S)
    assert os.path.exists(marker)
    # rows of the failed batch were acknowledged before Spark killed the task (1,550 in runs here:
    # the other task's 1,000 and 550 of the failing one's; with the window at 0 a rerun stores
    # them twice)
    assert 0 < stored(two_brokers, "OnceUdfOut") < len(bodies)

    rerun = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    finish(rerun)
    assert output_bodies(spark, two_brokers, "OnceUdfOut") == Counter(bodies)


@pytest.mark.slow
@needs_admission_control  # without a trigger limit one batch ends before the stop
def test_a_query_stopped_mid_batch_and_a_replayed_last_batch_store_every_row_once(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path
) -> None:
    """The query is stopped while it writes its first batch and started again; then its last batch
    is replayed (its commit removed, as after a driver crash between the writes and Spark's commit)."""
    two_brokers.create_topic("OnceStopIn", queues=2, on=("broker-a",))
    two_brokers.create_topic("OnceStopOut")
    bodies = fill(two_brokers, "OnceStopIn", 10_000)
    checkpoint = tmp_path / "ckpt"
    query = start_copy(spark, two_brokers, "OnceStopIn", "OnceStopOut", checkpoint, per_trigger=5_000, batchSize="200")
    try:
        wait_for(lambda: stored(two_brokers, "OnceStopOut") > 0, "the first written rows", 120)
    finally:
        query.stop()
    assert stored(two_brokers, "OnceStopOut") < len(bodies)  # stopped before the end

    finish(start_copy(spark, two_brokers, "OnceStopIn", "OnceStopOut", checkpoint, per_trigger=5_000, batchSize="200"))
    assert output_bodies(spark, two_brokers, "OnceStopOut") == Counter(bodies)

    replayed = forget_last_commit(checkpoint)
    finish(start_copy(spark, two_brokers, "OnceStopIn", "OnceStopOut", checkpoint, per_trigger=5_000, batchSize="200"))
    assert replayed >= 1
    assert output_bodies(spark, two_brokers, "OnceStopOut") == Counter(bodies)


@pytest.mark.slow
@pytest.mark.timeout(2 * QUERY_TIMEOUT_S + 180)
def test_a_broker_killed_mid_write_keeps_its_window_and_every_row_is_stored_once(
    spark: SparkSession, servers: ServerFactory, tmp_path: Path
) -> None:
    """The output topic lives on broker-b. While broker-b holds part of a batch, it is killed
    (kill -9) and the query stopped (a driver lost with it); broker-b comes back from its data on a
    new port and the query runs again from its checkpoint: the unfinished batch runs again (with the
    offsets and timestamp Spark logged for it), and broker-b drops the rows it had acknowledged
    before the kill, by the window it rebuilt from its commit log. Every input row is in the output
    once. (Should the batch have finished in between, its commit is removed, so that it runs again.)"""
    brokers = Brokers(servers, tmp_path, *PATIENT_SENDS)
    cluster = brokers.cluster
    cluster.create_topic("OnceKillIn", queues=2, on=("broker-a",))
    cluster.create_topic("OnceKillOut", queues=4, on=("broker-b",))
    bodies = fill(cluster, "OnceKillIn", 10_000)
    checkpoint = tmp_path / "ckpt"
    # one batch, written 50 rows a request: it takes long enough to be caught half written
    query = start_copy(spark, cluster, "OnceKillIn", "OnceKillOut", checkpoint, per_trigger=10_000, batchSize="50")
    try:
        wait_for(lambda: stored_on(cluster, "broker-b", "OnceKillOut", 4) > 0, "the first rows on broker-b", 120)
        cluster.brokers["broker-b"].kill()
    finally:
        query.stop()

    brokers.restart_b()
    wait_for(lambda: brokers.queue_count("OnceKillOut", "broker-b") == 4, "broker-b back in the route")
    kept = stored_on(cluster, "broker-b", "OnceKillOut", 4)
    assert kept > 0  # rows acknowledged before the kill survived it
    if newest(checkpoint, "offsets") == newest(checkpoint, "commits"):
        forget_last_commit(checkpoint)
    finish(start_copy(spark, cluster, "OnceKillIn", "OnceKillOut", checkpoint, per_trigger=10_000, batchSize="50"))
    assert output_bodies(spark, cluster, "OnceKillOut") == Counter(bodies)
