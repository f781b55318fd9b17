"""Batch reads that start and end at a time per queue (startingOffsetsByTimestamp,
endingOffsetsByTimestamp) and what happens when no message is that new."""

from __future__ import annotations

import json
import time

import pytest

from tests.spark.cluster import Row
from tests.spark.queries import batch, stamp_between


def msg_ids(rows: list[Row], broker: str | None = None) -> list[str]:
    return sorted(r[4] for r in rows if broker is None or r[1] == broker)


def test_offsets_by_timestamp_per_queue_and_the_strategy_when_none_is_newer(spark, two_brokers) -> None:
    two_brokers.create_topic("ByTime", queues=1)
    early = two_brokers.produce("ByTime", 10)
    middle = int(stamp_between().timestamp() * 1000)
    late = two_brokers.produce("ByTime", 10, first=10)
    future = int(time.time() * 1000) + 3_600_000

    def read_ids(**options: str) -> list[str]:
        return sorted(r.msgId for r in batch(spark, two_brokers, "ByTime", **options).select("msgId").collect())

    starting = json.dumps({"ByTime": {"broker-a": {"0": middle}, "broker-b": {"0": 0}}})
    assert read_ids(startingOffsetsByTimestamp=starting) == sorted(
        msg_ids(late, "broker-a") + msg_ids(early + late, "broker-b")
    )
    ending = json.dumps({"ByTime": {"broker-a": {"0": middle}}})  # broker-b not named: to its latest offset
    assert read_ids(endingOffsetsByTimestamp=ending) == sorted(
        msg_ids(early, "broker-a") + msg_ids(early + late, "broker-b")
    )

    too_new = json.dumps({"ByTime": {"broker-a": {"0": future}, "broker-b": {"0": middle}}})
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy=latest") as failure:
        read_ids(startingOffsetsByTimestamp=too_new)  # error: Kafka's default
    assert "broker-a" in str(failure.value)  # the queue without a message that new is named
    assert read_ids(startingOffsetsByTimestamp=too_new, startingOffsetsByTimestampStrategy="latest") == msg_ids(
        late, "broker-b"
    )
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy=latest"):
        read_ids(startingTimestamp=str(future))  # error: Kafka's default for every start by time
    assert read_ids(startingTimestamp=str(future), startingOffsetsByTimestampStrategy="latest") == []

    misspelt = json.dumps({"ByTime": {"broker-a": {"0": middle}, "broker-c": {"0": middle}}})
    with pytest.raises(Exception, match="startingOffsetsByTimestamp names queues the topics do not have") as failure:
        read_ids(startingOffsetsByTimestamp=misspelt)
    assert "ByTime@broker-c#0" in str(failure.value)
    with pytest.raises(Exception, match="endingOffsetsByTimestamp names queues the topics do not have"):
        read_ids(endingOffsetsByTimestamp=json.dumps({"ByTime": {"broker-a": {"3": middle}}}))
