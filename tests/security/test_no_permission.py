"""A NO_PERMISSION that is no ACL refusal (a topic whose write permission was wiped on one broker) is a
NoPermissionError that sends try again on another broker, as Java's producer does; only the ACL's own
refusals are AccessDeniedError, raised at once."""

from __future__ import annotations

from rocketspark import AsyncProducer, Message
from rocketspark.client.api import admin
from rocketspark.errors import AccessDeniedError, NoPermissionError, ResponseError
from rocketspark.processes import wait_registered
from rocketspark.protocol.body.topic import Perm, TopicConfig
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.waiting import eventually

TOPIC = "WipedOnA"


def test_only_acl_remarks_are_access_denied() -> None:
    wiped = ResponseError.for_code(16, "the topic WipedOnA is not writable on broker broker-a", "send")
    assert type(wiped) is NoPermissionError
    forbidden = ResponseError.for_code(16, "the topic[T] pulling message is forbidden", "pull")
    assert type(forbidden) is NoPermissionError
    refused = ResponseError.for_code(16, "No permission: PUB on topic T for access key ak", "send")
    assert type(refused) is AccessDeniedError


async def test_a_send_refused_by_a_wiped_topic_goes_to_the_other_broker(servers: ServerFactory) -> None:
    namesrv = servers.namesrv()
    brokers = servers.brokers(namesrv.address, ("broker-a", "broker-b"))
    remoting = RemotingClient()
    try:
        for broker in brokers.values():
            await admin.create_topic(remoting, broker.address, TopicConfig(TOPIC, 2, 2))
            wait_registered(namesrv.address, broker.address, (TOPIC,))
        async with AsyncProducer("wiped_producer", namesrv_addr=namesrv.address, send_timeout_ms=5_000) as producer:
            assert len(await producer.fetch_publish_queues(TOPIC)) == 4  # the route, writable on both
            instance = producer.instance
            assert instance is not None
            # the first periodic refresh must end before the wipe (it would read the wiped route); the next is in 30 s
            await eventually(lambda: instance.route_refreshes >= 1, what="the first route refresh")
            read_only = TopicConfig(TOPIC, 2, 2, perm=Perm.READ)
            await admin.create_topic(remoting, brokers["broker-a"].address, read_only)
            assert len(await producer.fetch_publish_queues(TOPIC)) == 4  # its route still says writable
            # round robin over the four queues: half of the sends pick broker-a first
            results = [await producer.send(Message(TOPIC, f"m{i}".encode())) for i in range(8)]
        assert {result.message_queue.broker_name for result in results} == {"broker-b"}
        stats_a = await admin.get_runtime_info(remoting, brokers["broker-a"].address)
        stats_b = await admin.get_runtime_info(remoting, brokers["broker-b"].address)
        assert int(stats_a["standardSendMessages"]) == 0
        assert int(stats_b["standardSendMessages"]) == 8
    finally:
        await remoting.close()
