"""Routes of topics no longer used are dropped, and so are heartbeats to brokers of no route in use."""

from __future__ import annotations

import pytest

from rocketspark import AsyncLitePullConsumer, AsyncProducer, ConsumeFromWhere, Message
from rocketspark.client.api import admin, client_manage
from rocketspark.client.config import ClientConfig
from rocketspark.errors import ServerSystemError
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.waiting import eventually


@pytest.mark.slow
async def test_a_broker_left_by_every_route_in_use_gets_no_more_heartbeats(
    servers: ServerFactory, remoting_client: RemotingClient
) -> None:
    namesrv = servers.namesrv()
    broker_a = servers.broker(namesrv.address, broker_name="broker-a")
    broker_b = servers.broker(namesrv.address, broker_name="broker-b")
    await admin.create_topic(remoting_client, broker_a.address, TopicConfig("OnlyOnA", 1, 1))
    await admin.create_topic(remoting_client, broker_b.address, TopicConfig("OnlyOnB", 1, 1))
    # one client instance for both (same settings and event loop); an idle connection closes after 1.5 s
    config = ClientConfig(
        namesrv_addr=namesrv.address,
        poll_name_server_interval_ms=200,
        heartbeat_broker_interval_ms=200,
        idle_timeout_s=1.5,
    )
    consumer = AsyncLitePullConsumer(
        "reads_a", client_config=config, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    consumer.subscribe("OnlyOnA")

    async def members_on_b() -> list[str]:
        try:
            return await client_manage.get_consumer_list(remoting_client, broker_b.address, "reads_a")
        except ServerSystemError:  # "no consumer for this group"
            return []

    async def forgotten_on_b() -> bool:
        return not await members_on_b()

    async with consumer:
        assert consumer.instance is not None
        instance = consumer.instance
        async with AsyncProducer("writes_b", client_config=config) as producer:
            assert producer.instance is instance
            await eventually(lambda: instance.routes.get("OnlyOnA"), what="the route of OnlyOnA")
            await producer.send(Message("OnlyOnB", b"to b"))
            # heartbeats name every group of the client: broker-b hears of the consumer group too
            await eventually(members_on_b, what="broker-b told of group reads_a")
        await eventually(lambda: "OnlyOnB" not in instance.routes, what="the route of OnlyOnB dropped")
        assert "broker-b" not in instance.broker_addresses and "OnlyOnA" in instance.routes
        # no more heartbeats to broker-b: the idle connection closes and broker-b forgets the member
        await eventually(forgotten_on_b, timeout_s=10, what="broker-b forgot group reads_a")
