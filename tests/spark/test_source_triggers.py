"""Trigger limits of the stream (minMessagesPerTrigger with maxTriggerDelay, maxBytesPerTrigger),
checked on the micro-batches' sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import DataFrame

from rocketspark import Message, Producer
from tests.spark.cluster import SparkCluster
from tests.spark.queries import stream, wait_for


def send(cluster: SparkCluster, topic: str, count: int, *, size: int = 10) -> None:
    """`count` messages of `size` bytes, round robin over the topic's queues."""
    with Producer(f"{topic}_producer", namesrv_addr=cluster.namesrv_addr) as producer:
        queues = producer.fetch_publish_queues(topic)
        for i in range(count):
            producer.send(Message(topic, f"{i:0{size}d}".encode()), queue=queues[i % len(queues)])


def total(offsets: str | None) -> int:
    if not offsets:
        return 0
    return sum(o for brokers in json.loads(offsets).values() for qs in brokers.values() for o in qs.values())


@pytest.mark.slow
def test_min_messages_per_trigger_waits_then_runs_at_the_max_trigger_delay(spark, two_brokers, tmp_path: Path) -> None:
    two_brokers.create_topic("MinTrigger", queues=1)
    sizes: list[int] = []

    def record(batch: DataFrame, batch_id: int) -> None:
        if rows := batch.count():  # Spark runs a first batch even when it is empty
            sizes.append(rows)

    frame = stream(
        spark,
        two_brokers,
        "MinTrigger",
        "min_trigger_group",
        startingOffsets="earliest",
        minMessagesPerTrigger="25",
        maxTriggerDelay="20s",
    )
    # every trigger that runs no batch reports progress: the source's latestOffset shows what it saw
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")
    writer = frame.writeStream.foreachBatch(record).option("checkpointLocation", str(tmp_path / "checkpoint"))
    query = writer.trigger(processingTime="200 milliseconds").start()

    def waited_with(count: int) -> bool:
        """A trigger saw `count` messages beyond the last batch and ran none."""
        return any(
            p["numInputRows"] == 0
            and total(p["sources"][0]["latestOffset"]) - total(p["sources"][0]["endOffset"]) == count
            for p in query.recentProgress
            if p["sources"] and p["sources"][0]["endOffset"] is not None
        )

    try:
        send(two_brokers, "MinTrigger", 10)
        wait_for(lambda: waited_with(10), "a trigger that saw 10 messages and waited")
        assert sizes == []
        send(two_brokers, "MinTrigger", 20)
        wait_for(lambda: sum(sizes) >= 30, "the batch of 30")
        assert sizes == [30]  # never a batch below the minimum before the delay
        send(two_brokers, "MinTrigger", 5)
        wait_for(lambda: waited_with(5), "a trigger that saw 5 messages and waited")
        assert sizes == [30]
        wait_for(lambda: sum(sizes) >= 35, "the batch of 5 at the delay")
        assert sizes == [30, 5]
    finally:
        query.stop()
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
