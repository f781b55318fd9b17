"""Overlapping first sends of a producer ask the name server for the topic's route once (issue 24 item 1).

Without that, every send started before the first answer asked again: at 1,000 sends a second, all
the sends of the first answer's time each sent a request to the name server and decoded its route.
"""

from __future__ import annotations

import asyncio

import pytest

from rocketspark import AsyncProducer, Message
from rocketspark.client.instance import ClientInstance
from rocketspark.protocol.body.route import TopicRouteData
from tests.client.conftest import Cluster
from tests.client.test_push_consumer import create_topic

OVERLAPPING = 64
SLOW_ANSWER_S = 0.2


async def test_overlapping_first_sends_fetch_the_route_once(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = "RouteOnce"
    await create_topic(cluster, topic, 4)
    fetched: list[str] = []
    real_fetch = ClientInstance.fetch_route

    async def counting_fetch(self: ClientInstance, asked: str) -> TopicRouteData | None:
        if asked not in self.routes:  # a fetch for want of a route (not a periodic refresh)
            fetched.append(asked)
        # a slow name server (a loaded machine): the first route refresh, 10 ms after the start,
        # comes while the first sends' fetch is still under way and must share it
        await asyncio.sleep(SLOW_ANSWER_S)
        return await real_fetch(self, asked)

    monkeypatch.setattr(ClientInstance, "fetch_route", counting_fetch)
    async with AsyncProducer("route_once", namesrv_addr=cluster.namesrv_addr) as producer:
        results = await asyncio.gather(*(producer.send(Message(topic, b"m%d" % i)) for i in range(OVERLAPPING)))
    assert len(results) == OVERLAPPING
    assert fetched == [topic]
