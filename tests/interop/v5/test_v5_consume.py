"""The official 5.x Python client's SimpleConsumer against the bundled broker's gRPC endpoint.

Receive and ack, with the group's progress in the 4.x consumer offsets (GET_CONSUME_STATS, what
`rocketspark group progress` shows); redelivery after the invisible time with a growing delivery
attempt, the refusal of a stale handle; ChangeInvisibleDuration; max attempts to %DLQ%<group>;
FIFO message groups one message at a time; tag and SQL92 filters; an empty long poll. Invisible times are
the client's whole seconds, so the redelivery scenarios take a few seconds each.
"""

from __future__ import annotations

import time

import pytest

from rocketspark.client.api import admin
from rocketspark.message.validation import dlq_topic
from tests.interop.v5.conftest import Grpc5Cluster
from tests.interop.v5.driver import Received, V5Client, V5Error, V5Message

pytestmark = pytest.mark.interop


async def lag(cluster: Grpc5Cluster, group: str, topic: str) -> tuple[int, int]:
    """(committed, max) offsets of the group over the topic's queues, as `rocketspark group progress` reads them."""
    stats = await admin.get_consume_stats(cluster.remoting, cluster.broker.address, group, topic)
    offsets = stats.offset_table.values()
    return sum(o.consumer_offset for o in offsets), sum(o.broker_offset for o in offsets)


async def test_receive_ack_and_the_groups_progress(shared_grpc_cluster: Grpc5Cluster, v5: V5Client) -> None:
    producer = v5.producer(shared_grpc_cluster.endpoint, topics=["v5_consume"])
    sent = {producer.send(V5Message("v5_consume", f"m{i}", tag="TagA", keys=[f"k{i}"])).message_id for i in range(6)}
    consumer = v5.simple_consumer(shared_grpc_cluster.endpoint, "v5_consumers", {"v5_consume": "*"}, await_s=1)
    received: list[Received] = []
    while len(received) < 6:
        batch = consumer.receive(max_messages=4, invisible_s=30)
        assert batch, f"only {len(received)} of 6 messages received"
        received += batch
    assert {m.message_id for m in received} == sent
    assert all(m.delivery_attempt == 1 and not m.corrupted and m.tag == "TagA" for m in received)
    assert sorted(m.body for m in received) == [f"m{i}" for i in range(6)]
    assert await lag(shared_grpc_cluster, "v5_consumers", "v5_consume") == (0, 6)

    for message in received:
        consumer.ack(message)
    assert await lag(shared_grpc_cluster, "v5_consumers", "v5_consume") == (6, 6)
    started = time.monotonic()
    assert consumer.receive(max_messages=4, invisible_s=30) == []  # MESSAGE_NOT_FOUND after the long poll
    assert 0.8 < time.monotonic() - started < 5
    consumer.shutdown()
    producer.shutdown()


@pytest.mark.slow
async def test_an_unacked_message_comes_back_and_its_old_handle_is_refused(
    shared_grpc_cluster: Grpc5Cluster, v5: V5Client
) -> None:
    producer = v5.producer(shared_grpc_cluster.endpoint, topics=["v5_again"])
    producer.send(V5Message("v5_again", "again"))
    consumer = v5.simple_consumer(shared_grpc_cluster.endpoint, "v5_again_group", {"v5_again": "*"}, await_s=3)
    [first] = consumer.receive(invisible_s=1)
    [second] = consumer.receive(invisible_s=1)  # the long poll wakes when the invisible time passes
    assert (second.body, second.delivery_attempt) == ("again", 2)
    with pytest.raises(V5Error, match=r"receipt handle is stale"):
        consumer.ack(first)
    [third] = consumer.receive(invisible_s=10)
    assert third.delivery_attempt == 3
    consumer.change_invisible(third, 1)  # the client keeps the new handle
    [fourth] = consumer.receive(invisible_s=10)
    assert fourth.delivery_attempt == 4
    consumer.change_invisible(fourth, 20)
    assert consumer.receive(invisible_s=10) == []  # invisible for 20 s now
    consumer.ack(fourth)  # with the handle ChangeInvisibleDuration answered
    assert await lag(shared_grpc_cluster, "v5_again_group", "v5_again") == (1, 1)
    consumer.shutdown()
    producer.shutdown()


async def test_the_last_attempt_goes_to_the_dead_letter_topic(shared_grpc_cluster: Grpc5Cluster, v5: V5Client) -> None:
    await admin.create_subscription_group(
        shared_grpc_cluster.remoting, shared_grpc_cluster.broker.address, "v5_dlq", retry_max_times=1
    )
    producer = v5.producer(shared_grpc_cluster.endpoint, topics=["v5_poison"])
    receipt = producer.send(V5Message("v5_poison", "poison", keys=["bad"]))
    consumer = v5.simple_consumer(shared_grpc_cluster.endpoint, "v5_dlq", {"v5_poison": "*"}, await_s=3)
    attempts = [m.delivery_attempt for _ in range(2) for m in consumer.receive(invisible_s=1)]
    assert attempts == [1, 2]  # retryMaxTimes 1: two attempts
    assert consumer.receive(invisible_s=1) == []
    [dead] = await shared_grpc_cluster.pull_queue(dlq_topic("v5_dlq"), 0)
    assert (dead.body, dead.keys, dead.msg_id) == (b"poison", "bad", receipt.message_id)
    assert dead.properties["RETRY_TOPIC"] == "v5_poison"
    assert await lag(shared_grpc_cluster, "v5_dlq", "v5_poison") == (1, 1)

    dead_letters = v5.simple_consumer(
        shared_grpc_cluster.endpoint, "v5_dlq_reader", {dlq_topic("v5_dlq"): "*"}, await_s=1
    )
    [again] = dead_letters.receive(invisible_s=10)  # a dead-letter topic is a topic 5.x consumers may read
    assert again.message_id == receipt.message_id
    dead_letters.shutdown()
    consumer.shutdown()
    producer.shutdown()


async def test_fifo_message_groups_and_tag_filters(shared_grpc_cluster: Grpc5Cluster, v5: V5Client) -> None:
    producer = v5.producer(shared_grpc_cluster.endpoint, topics=["v5_orders"])
    for i in range(3):
        for group in ("g1", "g2"):
            producer.send(V5Message("v5_orders", f"{group}-{i}", tag="order", message_group=group))
    producer.send(V5Message("v5_orders", "ignored", tag="audit"))
    consumer = v5.simple_consumer(shared_grpc_cluster.endpoint, "v5_fifo_group", {"v5_orders": "order"}, await_s=1)
    seen: dict[str, list[str]] = {"g1": [], "g2": []}
    for round_ in range(3):
        batch = consumer.receive(max_messages=16, invisible_s=30)
        assert sorted(m.message_group or "" for m in batch) == ["g1", "g2"]  # one of each group at a time
        if round_ == 0:
            assert consumer.receive(max_messages=16, invisible_s=30) == []  # the next ones wait for these
        for message in batch:
            seen[message.message_group or ""].append(message.body)
            consumer.ack(message)
    assert seen == {"g1": ["g1-0", "g1-1", "g1-2"], "g2": ["g2-0", "g2-1", "g2-2"]}
    assert consumer.receive(max_messages=16, invisible_s=30) == []  # "audit" is filtered out
    assert await lag(shared_grpc_cluster, "v5_fifo_group", "v5_orders") == (7, 7)  # and counted as consumed

    audit = v5.simple_consumer(shared_grpc_cluster.endpoint, "v5_audit", {"v5_orders": "audit || other"}, await_s=1)
    assert [m.body for m in audit.receive(max_messages=16, invisible_s=30)] == ["ignored"]
    audit.shutdown()
    sql = "SQL92:TAGS = 'order' AND (__SHARDINGKEY = 'g2' OR __SHARDINGKEY IS NULL)"
    selective = v5.simple_consumer(shared_grpc_cluster.endpoint, "v5_sql", {"v5_orders": sql}, await_s=1)
    bodies = []
    for _ in range(3):
        batch = selective.receive(max_messages=16, invisible_s=30)
        bodies += [m.body for m in batch]
        for message in batch:
            selective.ack(message)
    assert bodies == ["g2-0", "g2-1", "g2-2"]  # SQL92 over the properties: message group g2 only
    selective.shutdown()
    consumer.shutdown()
    producer.shutdown()
