"""The official 5.x Python client's PushConsumer against the bundled broker's gRPC endpoint.

It asks QueryAssignment every 5 s, receives with auto_renew, acks what its listener consumed and
nacks (ChangeInvisibleDuration by its backoff) what failed, which comes back with the next delivery
attempt; a FIFO group's consumer (consumeMessageOrderly) retries a failing message itself, in order,
then forwards it to %DLQ%<group> and goes on with the next one of its message group. The brokers
here retry after 1 s (messageDelayLevel: the settings' backoff is its levels from 3 on).
"""

from __future__ import annotations

import pytest

from rocketspark.client.api import admin
from rocketspark.message.validation import dlq_topic
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.interop.v5.conftest import Grpc5Cluster
from tests.interop.v5.driver import V5Client, V5Message
from tests.interop.v5.servers import grpc_broker
from tests.interop.v5.test_v5_consume import lag
from tests.waiting import eventually

pytestmark = [pytest.mark.interop, pytest.mark.slow]


@pytest.fixture
def quick_retries(servers: ServerFactory, remoting_client: RemotingClient) -> Grpc5Cluster:
    namesrv = servers.namesrv()
    broker, endpoint = grpc_broker(servers, namesrv.address, "--set", "messageDelayLevel=1s 1s 1s 1s")
    return Grpc5Cluster(namesrv, broker, endpoint, remoting_client)


async def test_a_failed_message_comes_back_with_the_next_attempt(quick_retries: Grpc5Cluster, v5: V5Client) -> None:
    producer = v5.producer(quick_retries.endpoint, topics=["v5_push"])
    for i in range(5):
        producer.send(V5Message("v5_push", f"p{i}"))
    consumer = v5.push_consumer(quick_retries.endpoint, "v5_pushers", {"v5_push": "*"}, fail_times=1)

    def consumed_twice() -> bool:
        return len(consumer.pushed()) >= 10

    await eventually(consumed_twice, timeout_s=30, interval_s=0.2, what="every message pushed twice")
    attempts: dict[str, list[int]] = {}
    for message in consumer.pushed():
        attempts.setdefault(message.body, []).append(message.delivery_attempt or 0)
    assert attempts == {f"p{i}": [1, 2] for i in range(5)}
    await eventually(lambda: _caught_up(quick_retries, "v5_pushers", "v5_push", 5), timeout_s=10, what="every ack")
    consumer.shutdown()
    producer.shutdown()


async def _caught_up(cluster: Grpc5Cluster, group: str, topic: str, count: int) -> tuple[int, int] | None:
    """The group's (committed, max) offsets once it committed `count` messages of the topic's `count`."""
    offsets = await lag(cluster, group, topic)
    return offsets if offsets == (count, count) else None


async def test_a_fifo_consumer_gives_up_on_a_message_in_order(quick_retries: Grpc5Cluster, v5: V5Client) -> None:
    await admin.create_subscription_group(
        quick_retries.remoting,
        quick_retries.broker.address,
        "v5_fifo_pushers",
        retry_max_times=1,
        consume_message_orderly=True,
    )
    producer = v5.producer(quick_retries.endpoint, topics=["v5_push_fifo"])
    for body in ("f0", "poison", "f2", "f3"):
        producer.send(V5Message("v5_push_fifo", body, message_group="account-1"))
    consumer = v5.push_consumer(
        quick_retries.endpoint, "v5_fifo_pushers", {"v5_push_fifo": "*"}, fail_bodies=["poison"]
    )
    await eventually(lambda: len(consumer.pushed()) >= 5, timeout_s=30, interval_s=0.2, what="five deliveries")
    # two local attempts of the failing message (retryMaxTimes + 1), in its place in the order
    assert [m.body for m in consumer.pushed()] == ["f0", "poison", "poison", "f2", "f3"]
    caught_up: tuple[int, int] | None = await eventually(
        lambda: _caught_up(quick_retries, "v5_fifo_pushers", "v5_push_fifo", 4), timeout_s=10, what="every ack"
    )
    assert caught_up == (4, 4)
    [dead] = await quick_retries.pull_queue(dlq_topic("v5_fifo_pushers"), 0)
    assert dead.body == b"poison"
    consumer.shutdown()
    producer.shutdown()
