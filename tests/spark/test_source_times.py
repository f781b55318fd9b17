"""Batch reads that start and end at a time per queue (startingOffsetsByTimestamp,
endingOffsetsByTimestamp) and what happens when no message is that new, on both flavors of the
broker: the bundled one's exact time search and Apache 4.9's nearest entry give the same rows."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest

from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import pull_all
from tests.spark.cluster import Row, SparkCluster, two_brokers_on
from tests.spark.queries import batch, stamp_between


@pytest.fixture(scope="module", params=["rocketspark", "apache"])
def two_brokers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """broker-a and broker-b of one flavor (each flavor runs every test of the module)."""
    factory = ServerFactory(tmp_path_factory.mktemp(f"spark-{request.param}"))
    try:
        yield two_brokers_on(factory, "--set", f"flavor={request.param}")
    finally:
        factory.stop_all()


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


def store_times(cluster: SparkCluster, topic: str) -> dict[str, list[int]]:
    """Store times of queue 0 of `topic` on each broker, in offset order."""

    async def read() -> dict[str, list[int]]:
        client = RemotingClient(request_timeout_s=10)
        try:
            return {
                name: [m.store_timestamp for m in await pull_all(client, broker.address, topic, 0)]
                for name, broker in cluster.brokers.items()
            }
        finally:
            await client.close()

    return asyncio.run(read())


def test_times_inside_a_millisecond_and_past_either_end(spark, two_brokers) -> None:
    """A time at which a whole batch was stored starts at its first message and ends before it;
    a time past the newest message keeps the newest; one before the oldest starts at the oldest."""
    two_brokers.create_topic("SameMs", queues=1)
    early = two_brokers.produce("SameMs", 2)
    stamp_between()
    same = two_brokers.produce("SameMs", 60, first=2, batched=True)  # 30 a queue, each in one millisecond
    stamp_between()
    late = two_brokers.produce("SameMs", 2, first=62)
    times = store_times(two_brokers, "SameMs")
    assert all(len(t) == 32 and len(set(t[1:31])) == 1 < len(set(t)) for t in times.values()), times

    def read_ids(**options: str) -> list[str]:
        return sorted(r.msgId for r in batch(spark, two_brokers, "SameMs", **options).select("msgId").collect())

    at_batch = json.dumps({"SameMs": {name: {"0": t[1]} for name, t in times.items()}})
    assert read_ids(startingOffsetsByTimestamp=at_batch) == msg_ids(same + late)
    assert read_ids(endingOffsetsByTimestamp=at_batch) == msg_ids(early)
    newest = max(t[-1] for t in times.values())
    assert read_ids(endingTimestamp=str(newest + 1)) == msg_ids(early + same + late)
    at_newest = json.dumps({"SameMs": {name: {"0": t[-1]} for name, t in times.items()}})
    assert read_ids(startingOffsetsByTimestamp=at_newest) == msg_ids(late)
    oldest = min(t[0] for t in times.values())
    assert read_ids(startingTimestamp=str(oldest - 1), endingTimestamp=str(newest + 3_600_000)) == msg_ids(
        early + same + late
    )
