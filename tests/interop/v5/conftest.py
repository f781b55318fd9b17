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


@pytest.fixture(scope="module")
def module_grpc_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess, str]]:
    """A name server and a gRPC broker for every test of a module (each test its own topics and groups)."""
    factory = ServerFactory(tmp_path_factory.mktemp("grpc-cluster"))
    try:
        namesrv = factory.namesrv()
        broker, endpoint = grpc_broker(factory, namesrv.address)
        yield namesrv, broker, endpoint
    finally:
        factory.stop_all()


@pytest.fixture
def shared_grpc_cluster(
    module_grpc_servers: tuple[ServerProcess, ServerProcess, str], remoting_client: RemotingClient
) -> Grpc5Cluster:
    """`grpc_cluster` on the module's servers: a test must not rely on what another left behind."""
    namesrv, broker, endpoint = module_grpc_servers
    return Grpc5Cluster(namesrv, broker, endpoint, remoting_client)


@pytest.fixture
def v5(tmp_path: Path) -> Iterator[V5Client]:
    """The official 5.x Python client in a child process (HOME in the test's tmp_path)."""
    with V5Client(tmp_path / "v5-home") as client:
        yield client
