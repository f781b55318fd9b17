"""The source never disturbs its consumer group's other members: it joins no group, so a push
consumer of the same group gets every queue and every message while a Spark query with that
`consumerGroup` runs, and the query does not move the group's offsets while that member is online."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from rocketspark import PushConsumer
from rocketspark.client.consumer.push.listeners import ConsumeStatus
from rocketspark.message.message import MessageExt
from rocketspark.protocol.body.heartbeat import ConsumeFromWhere
from tests.spark.cluster import SparkCluster
from tests.spark.queries import start_stream, stored_rows, stream, wait_for


class Received:
    """A push listener that keeps every body it is handed."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self._lock = threading.Lock()

    def __call__(self, messages: list[MessageExt]) -> ConsumeStatus:
        with self._lock:
            self.bodies.extend(m.body for m in messages)
        return ConsumeStatus.CONSUME_SUCCESS


@pytest.mark.slow
def test_a_push_consumer_of_the_query_s_group_gets_every_message(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path
) -> None:
    topic, group = "SharedGroup", "shared_group"
    two_brokers.create_topic(topic, queues=4)
    received = Received()
    first_offset = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    consumer = PushConsumer(group, namesrv_addr=two_brokers.namesrv_addr, consume_from_where=first_offset)
    consumer.subscribe(topic)
    consumer.register_listener(received)
    with consumer:
        first = two_brokers.produce(topic, 40, batched=True)
        wait_for(lambda: len(received.bodies) == 40, "the push consumer's first 40 messages")
        committed = wait_for_commits(two_brokers, group, topic, 40)

        output = tmp_path / "out"
        frame = stream(spark, two_brokers, topic, group, startingOffsets="earliest")  # a new checkpoint, from 0
        query = start_stream(frame.select("body"), output, tmp_path / "checkpoint")
        try:
            second = two_brokers.produce(topic, 60, first=40, batched=True)
            wait_for(lambda: stored_rows(spark, output) == 100, "the query's 100 rows")
            wait_for(lambda: len(received.bodies) == 100, "the push consumer's 100 messages")
            # the group's offsets are the push consumer's: never moved back to the query's start
            now = two_brokers.group_offsets(group, topic)
            assert all((now[q] or 0) >= (committed[q] or 0) for q in committed), (committed, now)
        finally:
            query.stop()
    assert sorted(received.bodies) == sorted(row[7] for row in first + second)


def wait_for_commits(cluster: SparkCluster, group: str, topic: str, total: int) -> dict[tuple[str, int], int | None]:
    """The group's committed offsets once they add up to `total` (the push consumer persists them
    every few seconds)."""
    found: dict[tuple[str, int], int | None] = {}

    def all_committed() -> bool:
        found.update(cluster.group_offsets(group, topic))
        return sum(o or 0 for o in found.values()) == total

    wait_for(all_committed, f"group {group}'s offsets at {total}")
    return found
