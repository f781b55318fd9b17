"""Trigger limits of the stream (minMessagesPerTrigger with maxTriggerDelay, maxBytesPerTrigger),
checked on the micro-batches' sizes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pyspark.sql import DataFrame

from rocketspark.errors import ConfigError
from rocketspark.spark.options import parse
from rocketspark.spark.source import offsets as offset_dicts
from rocketspark.spark.source.queue_view import QueueView
from rocketspark.spark.source.stream_reader import IDLE_POLL_INTERVAL_S
from tests.interop.wire import WireRecorder
from tests.spark.cluster import two_brokers_on
from tests.spark.queries import needs_admission_control, run_available_now, stream, wait_for


def total(offsets: str | None) -> int:
    if not offsets:
        return 0
    return sum(offset_dicts.from_dict(json.loads(offsets) or {}).values())  # batch 0's carried start aside


@pytest.mark.slow
@needs_admission_control
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
        # the run's first trigger runs at once with what there is, as Kafka's: send after it
        wait_for(lambda: bool(query.recentProgress), "the run's first trigger")
        two_brokers.produce("MinTrigger", 10, batched=True)
        wait_for(lambda: waited_with(10), "a trigger that saw 10 messages and waited")
        assert sizes == []
        # one batch send of 10 per queue: a trigger sees 20 or 30 waiting, never 25 to 29
        two_brokers.produce("MinTrigger", 20, batched=True)
        wait_for(lambda: sum(sizes) >= 30, "the batch of 30")
        assert sizes == [30]  # never a batch below the minimum before the delay
        two_brokers.produce("MinTrigger", 5, batched=True)
        wait_for(lambda: waited_with(5), "a trigger that saw 5 messages and waited")
        assert sizes == [30]
        wait_for(lambda: sum(sizes) >= 35, "the batch of 5 at the delay")
        assert sizes == [30, 5]
    finally:
        query.stop()
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")


def test_brokers_sum_stored_body_sizes_and_brokers_without_the_extension_are_named(two_brokers, servers) -> None:
    two_brokers.create_topic("Sized", queues=1)
    two_brokers.produce("Sized", 40, batched=True, body_size=100)  # 20 messages of 100 bytes in each queue
    view = QueueView(parse({"nameserver": two_brokers.namesrv_addr, "topic": "Sized"}, streaming=False))
    queue = view.queues(must_exist=True)[0]
    assert view.body_bytes({queue: (0, 20, 1050)}) == {queue: 10}
    assert view.body_bytes({queue: (5, 20, 10_000)}) == {queue: 20}
    assert view.body_bytes({queue: (0, 8, 10_000)}) == {queue: 8}  # never past the end asked
    assert view.body_bytes({queue: (3, 20, 99)}) == {queue: 3}  # not even one message fits

    standard = two_brokers_on(servers, "--set", "arrowEnable=false")
    standard.create_topic("Sized", queues=1)
    view = QueueView(parse({"nameserver": standard.namesrv_addr, "topic": "Sized"}, streaming=False))
    with pytest.raises(ConfigError, match="maxBytesPerTrigger needs brokers that sum stored body sizes"):
        view.body_bytes({q: (0, 1, 100) for q in view.queues(must_exist=True)})


@needs_admission_control
def test_max_bytes_per_trigger_caps_every_batch_of_an_available_now_run(spark, two_brokers, checkpoint) -> None:
    two_brokers.create_topic("ByteLimited", queues=1)
    two_brokers.produce("ByteLimited", 60, batched=True, body_size=100)
    frame = stream(
        spark, two_brokers, "ByteLimited", "byte_limited_group", startingOffsets="earliest", maxBytesPerTrigger="1000"
    )
    query = run_available_now(frame, "memory", checkpoint, name="byte_limited")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 10 and sum(sizes) == 60 and len(sizes) >= 6  # 1000 bytes: 10 bodies of 100
    assert spark.table("byte_limited").select("msgId").distinct().count() == 60


@needs_admission_control
def test_available_now_reads_everything_under_a_minimum_and_keeps_the_cap(spark, two_brokers, checkpoint) -> None:
    two_brokers.create_topic("MinAvailableNow", queues=1)
    two_brokers.produce("MinAvailableNow", 30, batched=True)
    frame = stream(
        spark,
        two_brokers,
        "MinAvailableNow",
        "min_available_now_group",
        startingOffsets="earliest",
        minMessagesPerTrigger="1000",
        maxTriggerDelay="1h",
        maxMessagesPerTrigger="20",
    )
    query = run_available_now(frame, "memory", checkpoint, name="min_available_now")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [20, 10]  # the minimum would have held both batches for an hour


def namesrv_requests(wire: WireRecorder) -> int:
    return sum(1 for f in wire.frames if f.link == "namesrv" and f.from_client and not f.is_response)


def test_a_stream_with_nothing_to_read_asks_the_name_servers_at_most_ten_times_a_second(
    spark, two_brokers, tmp_path: Path
) -> None:
    """Under the default trigger Spark plans again 10 ms after an empty plan; the source paces an idle
    stream to a plan per IDLE_POLL_INTERVAL_S. Each plan asks the name servers twice or more (the live
    brokers, the topic's route): about 30 plans a second unpaced here."""
    two_brokers.create_topic("IdleStream", queues=1)
    two_brokers.produce("IdleStream", 3)
    broker = next(iter(two_brokers.brokers.values()))
    with WireRecorder(two_brokers.namesrv_addr, broker.address) as wire:
        frame = spark.readStream.format("rocketmq").option("nameserver", wire.namesrv_address)
        frame = frame.option("topic", "IdleStream")
        frame = frame.option("consumerGroup", "idle_group").option("startingOffsets", "earliest").load()
        query = (
            frame.writeStream.format("memory")
            .queryName("idle_stream")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .start()
        )
        try:
            wait_for(lambda: spark.table("idle_stream").count() == 3, "the stream's first rows")
            time.sleep(1.0)  # idle by now
            before, began = namesrv_requests(wire), time.monotonic()
            time.sleep(4.0)
            per_second = (namesrv_requests(wire) - before) / (time.monotonic() - began)
            assert query.isActive, query.exception()
        finally:
            query.stop()
    plans_at_most = 1 / IDLE_POLL_INTERVAL_S
    assert 0 < per_second <= 3 * plans_at_most, f"{per_second:.1f} requests a second to the name servers"
