"""Batch 0 run again after a crash reads the range it read the first time, whatever the starting
option: Spark takes a replayed batch 0's start from `initialOffset()`, which resolves `latest`
afresh, so the start travels in batch 0's end (`rocketspark.spark.source.offsets.START_KEY`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from rocketspark.spark import versions
from rocketspark.spark.source.offsets import START_KEY
from tests.spark.cluster import SparkCluster
from tests.spark.queries import forget_last_commit, newest, plan_next, stamp_between, stream, stream_reader, wait_for

QUEUES = 2


def record(seen: dict[int, list[str]]) -> Callable[[DataFrame, int], None]:
    """foreachBatch: each batch's sorted msgIds, the last run of a batch id kept."""

    def keep(batch: DataFrame, batch_id: int) -> None:
        seen[batch_id] = sorted(r.msgId for r in batch.select("msgId").collect())

    return keep


def run_available_now(frame: DataFrame, checkpoint: Path, seen: dict[int, list[str]]) -> None:
    writer = frame.writeStream.foreachBatch(record(seen)).option("checkpointLocation", str(checkpoint))
    assert writer.trigger(availableNow=True).start().awaitTermination(180)


@pytest.mark.slow
@pytest.mark.parametrize("starting", ["latest", "earliest", "timestamp", "json"])
def test_batch_0_run_again_after_a_crash_reads_the_same_rows(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path, starting: str
) -> None:
    topic, group = f"Replay0_{starting}", f"replay0_{starting}"
    two_brokers.create_topic(topic, queues=QUEUES, on=("broker-a",))
    before = two_brokers.produce(topic, 10, on=("broker-a",))
    options = {
        "latest": {"startingOffsets": "latest"},
        "earliest": {"startingOffsets": "earliest"},
        "timestamp": {"startingTimestamp": str(int(stamp_between(0.05).timestamp() * 1000))},
        "json": {"startingOffsets": json.dumps({topic: {"broker-a": {str(q): 2 for q in range(QUEUES)}}})},
    }[starting]
    checkpoint = tmp_path / "checkpoint"
    first: dict[int, list[str]] = {}

    def frame() -> DataFrame:
        return stream(spark, two_brokers, topic, group, **options)

    if starting == "latest":  # batch 0 holds what is sent once the query has started
        writer = frame().writeStream.foreachBatch(record(first)).option("checkpointLocation", str(checkpoint))
        query = writer.trigger(processingTime="200 milliseconds").start()
        try:
            wait_for(lambda: query.lastProgress is not None, "the first planning (the start resolved)")
            during = two_brokers.produce(topic, 20, first=10, on=("broker-a",))
            wait_for(lambda: 0 in first, "batch 0")
        finally:
            query.stop()
    else:
        during = two_brokers.produce(topic, 20, first=10, on=("broker-a",))
        run_available_now(frame(), checkpoint, first)
    assert first[0] or starting == "latest", "batch 0 read nothing"  # latest: batch 0 is planned at the start
    logged = json.loads((checkpoint / "offsets" / "0").read_text().splitlines()[-1])
    assert START_KEY in json.dumps(logged)  # the start travels in batch 0's end

    while newest(checkpoint, "offsets") > 0:  # keep batch 0 only, as if the query died before committing it
        last = newest(checkpoint, "offsets")
        for log in ("offsets", "commits"):
            (checkpoint / log / str(last)).unlink(missing_ok=True)
            (checkpoint / log / f".{last}.crc").unlink(missing_ok=True)
    forget_last_commit(checkpoint)
    after = two_brokers.produce(topic, 7, first=30, on=("broker-a",))  # after the crash: "latest" is later now

    again: dict[int, list[str]] = {}
    run_available_now(frame(), checkpoint, again)
    assert again[0] == first[0]
    if not versions.has(versions.ADMISSION_CONTROL):  # Spark's fallback ran the unfinished batch alone
        run_available_now(frame(), checkpoint, again)
    # and every message from the query's start on is read once in all (batch 0's and the later ones)
    wanted = {
        "latest": during + after,
        "earliest": before + during + after,
        "timestamp": during + after,
        "json": [row for row in before + during + after if row[3] >= 2],
    }[starting]
    read = [msg_id for batch in again.values() for msg_id in batch]
    assert sorted(read) == sorted(row[4] for row in wanted)


def ranges(partitions: Sequence[object]) -> list[tuple[object, ...]]:
    """What the planned partitions read: (queue, start, end) of each range, sorted."""
    return sorted((r.queue, r.start, r.end) for p in partitions for r in p.ranges)  # type: ignore[attr-defined]


def test_a_non_empty_batch_0_under_latest_is_planned_again_from_its_first_start(two_brokers: SparkCluster) -> None:
    """The calls Spark makes, on the reader itself: a first run resolves `latest`, messages arrive
    before its first planning (batch 0 holds them), and the run dies before committing; a new reader
    (the restarted query) resolves `latest` anew, after more messages, and Spark hands it that as
    batch 0's start with batch 0's logged end."""
    topic = "Replay0Gap"
    two_brokers.create_topic(topic, queues=QUEUES, on=("broker-a",))
    two_brokers.produce(topic, 10, on=("broker-a",))
    options = {"nameserver": two_brokers.namesrv_addr, "topic": topic, "consumerGroup": "replay0_gap"}

    first = stream_reader({**options, "startingOffsets": "latest"})
    start = first.initialOffset()
    two_brokers.produce(topic, 20, first=10, on=("broker-a",))
    end = json.loads(json.dumps(plan_next(first, start)))  # as the offset log keeps it
    planned = ranges(first.partitions(start, end))
    assert sum(e - s for _, s, e in planned) == 20

    two_brokers.produce(topic, 7, first=30, on=("broker-a",))
    again = stream_reader({**options, "startingOffsets": "latest"})
    assert ranges(again.partitions(again.initialOffset(), end)) == planned
