"""Fixtures of the interop tests: our name server and broker, the real client pointed at them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rocketspark.client.api import offset
from rocketspark.client.api.route import get_route
from rocketspark.message.message import MessageExt
from rocketspark.processes import ServerProcess
from rocketspark.protocol.body.route import TopicRouteData
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import pull_all
from tests.interop.driver import RealClient
from tests.waiting import eventually

DEFAULT_TOPIC = "TBW102"  # the template topic a producer looks up when its topic does not exist yet
READER_GROUP = "interop_raw_reader"


@dataclass
class Cluster:
    """A name server and a broker of ours, the real client pointed at them, and our own client for checks."""

    namesrv: ServerProcess
    broker: ServerProcess
    client: RealClient
    remoting: RemotingClient
    clients: list[RealClient] = field(default_factory=list)

    def client_via(self, namesrv_address: str) -> RealClient:
        """The real client given another name server address (a :class:`WireRecorder`'s)."""
        client = RealClient(namesrv_address, self.client.home, self.client.servers)
        self.clients.append(client)
        return client

    async def route(self, topic: str, timeout_s: float = 10.0) -> TopicRouteData:
        """The topic's route, waiting for the broker to register it with the name server."""
        return await eventually(
            lambda: get_route(self.remoting, self.namesrv.address, topic),
            timeout_s=timeout_s,
            what=f"a route of {topic}",
        )

    async def queue_count(self, topic: str) -> int:
        (queue_data,) = (await self.route(topic)).queue_datas
        return queue_data.read_queue_nums

    async def pull_queue(self, topic: str, queue_id: int) -> list[MessageExt]:
        """Every message of one queue, read with our raw PULL_MESSAGE (subscription "*" in the request)."""
        return await pull_all(self.remoting, self.broker.address, topic, queue_id, group=READER_GROUP)

    async def pull_all(self, topic: str) -> list[MessageExt]:
        queues = range(await self.queue_count(topic))
        return [message for queue_id in queues for message in await self.pull_queue(topic, queue_id)]

    async def max_offset(self, topic: str, queue_id: int) -> int:
        return await offset.get_max_offset(self.remoting, self.broker.address, topic, queue_id)

    async def consumer_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset (QUERY_CONSUMER_OFFSET); None when the broker has none."""
        return await offset.query_consumer_offset(
            self.remoting, self.broker.address, group, topic, queue_id, set_zero_if_not_found=False
        )


@pytest.fixture
async def cluster(servers: ServerFactory, remoting_client: RemotingClient, tmp_path: Path) -> AsyncIterator[Cluster]:
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address)
    home = tmp_path / "client-home"
    home.mkdir()
    client = RealClient(namesrv.address, home, [namesrv, broker])
    cluster = Cluster(namesrv, broker, client, remoting_client, [client])
    try:
        await cluster.route(DEFAULT_TOPIC)  # registered: producers can create topics on first send
        yield cluster
    finally:
        for real_client in cluster.clients:
            real_client.close()
