"""Mirroring the query's position to the group's consumer offsets when a broker drops the mirror.

These drive the stream reader that `RocketMQDataSource.streamReader` builds through the calls Spark
makes on the driver (initialOffset, latestOffset, prepareForTriggerAvailableNow), against real
brokers, so the moment a broker dies can be placed exactly between two of them."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from rocketspark.spark import versions
from rocketspark.spark.source.stream_reader import RocketMQStreamReader
from tests.spark.cluster import Brokers, ends_of
from tests.spark.queries import plan_next, stream_reader


def reader_of(brokers: Brokers, topic: str, group: str) -> RocketMQStreamReader:
    options = {
        "nameserver": brokers.cluster.namesrv_addr,
        "topic": topic,
        "consumerGroup": group,
        "startingOffsets": "earliest",
        "pullTimeoutMs": "60000",
    }
    return stream_reader(options)


def as_ends(offsets: dict[str, Any], topic: str) -> dict[tuple[str, int], int]:
    return {(b, int(q)): o for b, queues in offsets[topic].items() for q, o in queues.items()}


@pytest.mark.slow
def test_a_mirror_a_broker_dropped_is_sent_again(brokers: Brokers) -> None:
    cluster = brokers.cluster
    cluster.create_topic("Mirrored", queues=2)
    sent = cluster.produce("Mirrored", 20)
    reader = reader_of(brokers, "Mirrored", "mirrored_group")
    start = reader.initialOffset()
    end = plan_next(reader, start)  # Spark runs the batch start..end
    assert as_ends(end, "Mirrored") == ends_of(sent)
    cluster.brokers["broker-b"].kill()
    assert plan_next(reader, end) == end  # mirrors `end`: broker-b is dead
    assert cluster.group_offsets("mirrored_group", "Mirrored", 2, on=("broker-a",)) == {
        q: o for q, o in ends_of(sent).items() if q[0] == "broker-a"
    }
    brokers.restart_b()
    assert plan_next(reader, end) == end  # nothing new: only the mirror again
    assert cluster.group_offsets("mirrored_group", "Mirrored", 2) == ends_of(sent)


@pytest.mark.slow
@pytest.mark.skipif(
    not versions.has(versions.ADMISSION_CONTROL), reason="Trigger.AvailableNow runs through the source from PySpark 4.2"
)
def test_the_last_mirror_of_an_available_now_run_waits_for_the_broker(brokers: Brokers) -> None:
    cluster = brokers.cluster
    cluster.create_topic("LastMirror", queues=2)
    sent = cluster.produce("LastMirror", 20)
    reader = reader_of(brokers, "LastMirror", "last_mirror_group")
    reader.prepareForTriggerAvailableNow()  # type: ignore[attr-defined]
    start = reader.initialOffset()
    end = plan_next(reader, start)
    cluster.brokers["broker-b"].kill()
    restart = threading.Timer(3.0, brokers.restart_b)
    restart.start()  # comes back while the run's last planning step waits for it
    try:
        assert plan_next(reader, end) == end  # the run ends here
    finally:
        restart.join(60)
    assert cluster.group_offsets("last_mirror_group", "LastMirror", 2) == ends_of(sent)
