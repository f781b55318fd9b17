"""Mirroring the query's position to the group's consumer offsets when a broker drops the mirror.

These drive the stream reader that `RocketMQDataSource.streamReader` builds through the calls Spark
makes on the driver (initialOffset, latestOffset, prepareForTriggerAvailableNow), against real
brokers, so the moment a broker dies can be placed exactly between two of them."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from rocketspark.spark.datasource import RocketMQDataSource
from rocketspark.spark.source.stream_reader import RocketMQStreamReader
from tests.spark.cluster import Brokers, ends_of


def stream_reader(brokers: Brokers, topic: str, group: str) -> RocketMQStreamReader:
    options = {
        "nameserver": brokers.cluster.namesrv_addr,
        "topic": topic,
        "consumerGroup": group,
        "startingOffsets": "earliest",
        "pullTimeoutMs": "60000",
    }
    source = RocketMQDataSource(options)
    return source.streamReader(source.schema())


def as_ends(offsets: dict[str, Any], topic: str) -> dict[tuple[str, int], int]:
    return {(b, int(q)): o for b, queues in offsets[topic].items() for q, o in queues.items()}


@pytest.mark.slow
def test_a_mirror_a_broker_dropped_is_sent_again(brokers: Brokers) -> None:
    cluster = brokers.cluster
    cluster.create_topic("Mirrored", queues=2)
    sent = cluster.produce("Mirrored", 20)
    reader = stream_reader(brokers, "Mirrored", "mirrored_group")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())  # Spark runs the batch start..end
    assert as_ends(end, "Mirrored") == ends_of(sent)
    cluster.brokers["broker-b"].kill()
    assert reader.latestOffset(end, ReadAllAvailable()) == end  # mirrors `end`: broker-b is dead
    assert cluster.group_offsets("mirrored_group", "Mirrored", 2, on=("broker-a",)) == {
        q: o for q, o in ends_of(sent).items() if q[0] == "broker-a"
    }
    brokers.restart_b()
    assert reader.latestOffset(end, ReadAllAvailable()) == end  # nothing new: only the mirror again
    assert cluster.group_offsets("mirrored_group", "Mirrored", 2) == ends_of(sent)


@pytest.mark.slow
def test_the_last_mirror_of_an_available_now_run_waits_for_the_broker(brokers: Brokers) -> None:
    cluster = brokers.cluster
    cluster.create_topic("LastMirror", queues=2)
    sent = cluster.produce("LastMirror", 20)
    reader = stream_reader(brokers, "LastMirror", "last_mirror_group")
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    cluster.brokers["broker-b"].kill()
    restart = threading.Timer(3.0, brokers.restart_b)
    restart.start()  # comes back while the run's last planning step waits for it
    try:
        assert reader.latestOffset(end, ReadAllAvailable()) == end  # the run ends here
    finally:
        restart.join(60)
    assert cluster.group_offsets("last_mirror_group", "LastMirror", 2) == ends_of(sent)
