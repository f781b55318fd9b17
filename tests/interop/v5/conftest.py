"""Fixtures of the 5.x client tests: a broker serving gRPC, and the official 5.x client driving it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocketspark.message.message import MessageExt
from rocketspark.processes import ServerProcess
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import pull_all
from tests.interop.v5.driver import V5Client
from tests.interop.v5.servers import grpc_broker


@dataclass
class Grpc5Cluster:
    namesrv: ServerProcess
    broker: ServerProcess
    endpoint: str  # the broker's gRPC endpoint, host:port
    remoting: RemotingClient  # our 4.x client, for checks

    async def pull_queue(self, topic: str, queue_id: int) -> list[MessageExt]:
        """Every message of one queue, read with our 4.x PULL_MESSAGE (subscription "*")."""
        return await pull_all(self.remoting, self.broker.address, topic, queue_id, group="v5_raw_reader")

    async def pull_all(self, topic: str, queues: int = 8) -> list[MessageExt]:
        return [message for queue_id in range(queues) for message in await self.pull_queue(topic, queue_id)]


@pytest.fixture
def grpc_cluster(servers: ServerFactory, remoting_client: RemotingClient) -> Grpc5Cluster:
    namesrv = servers.namesrv()
    broker, endpoint = grpc_broker(servers, namesrv.address)
    return Grpc5Cluster(namesrv, broker, endpoint, remoting_client)


@pytest.fixture
def v5(tmp_path: Path) -> Iterator[V5Client]:
    """The official 5.x Python client in a child process (HOME in the test's tmp_path)."""
    with V5Client(tmp_path / "v5-home") as client:
        yield client
