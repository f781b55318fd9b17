from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from rocketspark.processes import ServerProcess
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[ServerFactory]:
    """Start name servers (and brokers) as subprocesses; all are stopped after the test."""
    factory = ServerFactory(tmp_path / "servers")
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture
def namesrv(servers: ServerFactory) -> ServerProcess:
    return servers.namesrv()


@pytest.fixture
async def remoting_client() -> AsyncIterator[RemotingClient]:
    client = RemotingClient(request_timeout_s=5.0)
    try:
        yield client
    finally:
        await client.close()
