"""Micro-batch bounds under a tag filter: a partition yields exactly the matching messages of its
planned range [start, end), never one at or past `end`, with the Arrow pull and the standard pull."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from rocketspark.spark.source import offsets as offset_dicts
from tests.harness import ServerFactory
from tests.spark.cluster import Row, SparkCluster, ends_of
from tests.spark.queries import (
    forget_last_commit,
    needs_admission_control,
    run_available_now,
    run_recording_batches,
    start_stream,
    stream,
    wait_for,
)

#: a tag cycle where every fourth message is an `A` (for a topic of one queue)
EVERY_FOURTH_A = ("A", "B", "C", "D")
#: a tag cycle that mixes tags within each of 8 queues (messages go round robin over the queues)
EVERY_THIRD_A = ("A", "B", "C")


#: broker flags of each kind of pull: Arrow, standard, and standard pulls capped at 32 messages (apache)
PULL_KINDS = {"arrow": (), "standard": ("--set", "arrowEnable=false"), "apache": ("--set", "flavor=apache")}


@pytest.fixture(params=list(PULL_KINDS))
def pull_kind_cluster(request: pytest.FixtureRequest, servers: ServerFactory) -> SparkCluster:
    """One broker whose pulls are Arrow pulls, one with the Arrow codes turned off, or one of
    flavor=apache (no Arrow codes, standard pulls of at most 32 messages)."""
    namesrv = servers.namesrv()
    extra = PULL_KINDS[request.param]
    return SparkCluster(namesrv, {"broker-a": servers.broker(namesrv.address, *extra)})


def test_batch_read_with_tags_stops_at_the_ending_offsets(spark: SparkSession, pull_kind_cluster: SparkCluster) -> None:
    cluster = pull_kind_cluster
    cluster.create_topic("TagEnds", queues=1)
    sent = cluster.produce("TagEnds", 32, tag_cycle=EVERY_FOURTH_A)
    frame = (
        spark.read.format("rocketmq")
        .option("nameserver", cluster.namesrv_addr)
        .option("topic", "TagEnds")
        .option("tags", "A")
        .option("startingOffsets", "earliest")
        .option("endingOffsets", json.dumps({"TagEnds": {"broker-a": {"0": 8}}}))
        .load()
    )
    assert sorted(r.queueOffset for r in frame.select("queueOffset").collect()) == [0, 4]
    assert {r[3] for r in sent if r[5] == "A" and r[3] < 8} == {0, 4}


@pytest.mark.slow
def test_live_stream_with_tags_stores_every_matching_message_once(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path
) -> None:
    two_brokers.create_topic("LiveTags")
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    frame = stream(spark, two_brokers, "LiveTags", "live_tags_group", startingOffsets="earliest", tags="A")
    query = start_stream(frame, output, checkpoint)
    sent: list[Row] = []
    try:
        deadline = time.monotonic() + 150
        # keep sending while the query runs, until its batches have taken messages at least 5 times
        while len(sent) < 240 or len({p["batchId"] for p in query.recentProgress if p["numInputRows"]}) < 5:
            assert time.monotonic() < deadline, "the query did not keep up with the producer"
            assert query.isActive, query.exception()
            sent += two_brokers.produce("LiveTags", 40, tag_cycle=EVERY_THIRD_A, first=len(sent))
            time.sleep(0.3)
        # the group's offsets reach the queues' ends once every batch up to them is in the sink; batches
        # are contiguous ranges, so no later one can hold these offsets again
        ends = ends_of(sent)
        wait_for(lambda: two_brokers.group_offsets("live_tags_group", "LiveTags") == ends, "the queues' ends")
    finally:
        query.stop()
    stored = sorted(r.msgId for r in spark.read.parquet(str(output)).select("msgId").collect())
    assert stored == sorted(r[4] for r in sent if r[5] == "A")


@needs_admission_control
def test_max_messages_per_trigger_with_tags_is_never_exceeded(
    spark: SparkSession, two_brokers: SparkCluster, checkpoint: Path
) -> None:
    two_brokers.create_topic("LimitedTags")
    sent = two_brokers.produce("LimitedTags", 320, tag_cycle=EVERY_THIRD_A)
    frame = stream(
        spark,
        two_brokers,
        "LimitedTags",
        "limited_tags_group",
        startingOffsets="earliest",
        tags="A",
        maxMessagesPerTrigger="40",
    )
    query = run_available_now(frame, "memory", checkpoint, name="limited_tags")
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    for p in progress:  # each batch spans at most 40 offsets, so at most 40 messages
        start, end = (
            offset_dicts.from_dict(json.loads(p["sources"][0][k] or "null") or {}) for k in ("startOffset", "endOffset")
        )
        spanned = sum(e - start.get(q, 0) for q, e in end.items())  # batch 0's carried start aside
        assert spanned <= 40 and p["numInputRows"] <= spanned
    assert len(progress) >= 5
    rows = sorted(r.msgId for r in spark.table("limited_tags").select("msgId").collect())
    assert rows == sorted(r[4] for r in sent if r[5] == "A")


@pytest.mark.slow
@needs_admission_control
def test_replayed_batch_with_tags_gives_the_same_rows(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path
) -> None:
    two_brokers.create_topic("ReplayedTags")
    sent = two_brokers.produce("ReplayedTags", 240, tag_cycle=EVERY_THIRD_A)
    checkpoint = tmp_path / "ckpt"
    seen: dict[int, list[list[str]]] = {}
    options = {"startingOffsets": "earliest", "tags": "A", "maxMessagesPerTrigger": "50"}
    for run in range(2):
        run_recording_batches(
            stream(spark, two_brokers, "ReplayedTags", "replayed_tags_group", **options), checkpoint, seen
        )
        if run == 0:
            forget_last_commit(checkpoint)  # Spark runs that batch again from its logged offsets
            sent += two_brokers.produce("ReplayedTags", 40, tag_cycle=EVERY_THIRD_A, first=240)  # past its end
    replayed = [batches for batches in seen.values() if len(batches) == 2]
    assert len(replayed) == 1 and replayed[0][0] == replayed[0][1] and replayed[0][0]
    every = [m for batches in seen.values() for m in batches[0]]
    assert sorted(every) == sorted(r[4] for r in sent if r[5] == "A")


def test_a_read_of_a_range_without_messages_is_empty(spark: SparkSession, two_brokers: SparkCluster) -> None:
    two_brokers.create_topic("NothingHere")
    reader = spark.read.format("rocketmq").option("nameserver", two_brokers.namesrv_addr).option("topic", "NothingHere")
    assert reader.load().count() == 0  # no partition is planned: Spark hands the reader one of its own
    two_brokers.produce("NothingHere", 8)
    assert reader.option("startingOffsets", "latest").load().count() == 0
