"""Queue ranges split into more Spark partitions than queues (minPartitions, maxRecordsPerPartition),
batch and streaming, against two brokers with one queue each."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.spark.cluster import SparkCluster
from tests.spark.queries import batch, needs_admission_control, stream, wait_for

TAGS = ("A", "B", "C")  # a cycle of 3 over 2 queues: split points never line up with tags
SEND_BATCH = 500


def send(cluster: SparkCluster, topic: str, first: int, count: int) -> list[tuple[str, str]]:
    """Messages first..first+count-1 (message i to queue i % 2 with tag TAGS[i % 3]), in batch
    sends of SEND_BATCH messages; returns (body, tag) of each."""
    rows = []
    for at in range(first, first + count, SEND_BATCH):
        rows += cluster.produce(topic, min(SEND_BATCH, first + count - at), first=at, tag_cycle=TAGS, batched=True)
    return [(body.decode(), tag) for *_, tag, _, body in rows]


def bodies(frame: DataFrame) -> list[str]:
    return sorted(r.body for r in frame.selectExpr("CAST(body AS STRING) AS body").collect())


@pytest.mark.slow
def test_a_2_queue_topic_read_in_split_ranges(spark, two_brokers) -> None:
    two_brokers.create_topic("Split", queues=1)
    sent = send(two_brokers, "Split", 0, 6000)

    split = batch(spark, two_brokers, "Split", minPartitions="6")
    assert split.rdd.getNumPartitions() >= 6
    rows = split.select(F.spark_partition_id().alias("p"), "brokerName", "queueOffset", "body").collect()
    assert sorted(r.body.decode() for r in rows) == sorted(b for b, _ in sent)  # every message once
    by_partition: dict[int, list[tuple[str, int]]] = {}
    for row in rows:
        by_partition.setdefault(row.p, []).append((row.brokerName, row.queueOffset))
    assert len(by_partition) >= 6
    for offsets in by_partition.values():  # one queue per partition, consecutive offsets in order
        assert len({b for b, _ in offsets}) == 1
        assert [o for _, o in offsets] == list(range(offsets[0][1], offsets[0][1] + len(offsets)))

    tagged = batch(spark, two_brokers, "Split", minPartitions="6", tags="A")
    assert bodies(tagged) == sorted(b for b, t in sent if t == "A")  # exact at every piece's ends

    capped = batch(spark, two_brokers, "Split", maxRecordsPerPartition="700")
    sizes = Counter(r.p for r in capped.select(F.spark_partition_id().alias("p")).collect())
    assert max(sizes.values()) <= 700 and sum(sizes.values()) == 6000
    assert len(sizes) == 10  # 3000 per queue: 5 pieces each


@pytest.mark.slow
@needs_admission_control
def test_stream_of_split_ranges_reads_each_tagged_message_once_while_a_producer_sends(
    spark, two_brokers, tmp_path: Path
) -> None:
    two_brokers.create_topic("SplitStream", queues=1)
    sent = send(two_brokers, "SplitStream", 0, 3000)
    seen: list[str] = []
    partitions: list[int] = []

    def record(micro_batch: DataFrame, batch_id: int) -> None:
        partitions.append(micro_batch.rdd.getNumPartitions())
        seen.extend(bodies(micro_batch))

    frame = stream(
        spark,
        two_brokers,
        "SplitStream",
        "split_stream_group",
        startingOffsets="earliest",
        tags="A || C",
        minPartitions="6",
        maxMessagesPerTrigger="1200",
    )
    writer = frame.writeStream.foreachBatch(record).option("checkpointLocation", str(tmp_path / "checkpoint"))
    query = writer.trigger(processingTime="300 milliseconds").start()
    try:
        producing = threading.Thread(target=lambda: sent.extend(send(two_brokers, "SplitStream", 3000, 3000)))
        producing.start()
        producing.join(120)
        assert not producing.is_alive(), "the producer did not finish in 120 s"
        expected = sorted(b for b, t in sent if t in ("A", "C"))
        wait_for(lambda: len(seen) >= len(expected), "every matching message")
        # the group's offsets reach the queues' ends once the next trigger plans from there
        wait_for(
            lambda: set(two_brokers.group_offsets("split_stream_group", "SplitStream", 1).values()) == {3000},
            "the group's offsets at the end of both queues",
        )
    finally:
        query.stop()
    assert sorted(seen) == expected
    assert max(partitions) >= 6 and len(partitions) >= 5
