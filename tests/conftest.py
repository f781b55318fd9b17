from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from rocketspark.processes import ServerProcess
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory

#: JIT flags for every JVM the tests start (the session's, the Spark jobs, docs examples and notebooks
#: run in subprocesses, local-cluster executors): these JVMs live seconds to minutes and run little
#: data, and on a small CI machine the optimizing compiler's threads cost more CPU than they save
#: (C1 only halves a short Spark run's JVM CPU time). Set before any JVM starts; inherited by children.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
os.environ["JAVA_TOOL_OPTIONS"] = " ".join(filter(None, (os.environ.get("JAVA_TOOL_OPTIONS"), TEST_JVM_OPTIONS)))


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
