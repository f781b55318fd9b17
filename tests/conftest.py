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


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the groups into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Groups for pytest-xdist's `--dist loadgroup` (`make test` runs two workers).

    Every test that uses the run's SparkSession (the `spark` fixture) joins one group, so one worker
    holds the run's one SparkSession; they go first, as they are the longest share of the run. Every
    other test is grouped with its module, so a module's fixtures start once; modules of slow tests
    start next. Most of the suite waits
    on servers and JVMs rather than computing (7.5 min of CPU in a 20 min serial run), which is why
    two workers on two cores shorten it. Without xdist the marks do nothing. (pytest-xdist 3.8 keeps a
    group on one worker only under pytest 8, and only when the marks are set before its own hook.)
    """
    for item in items:
        uses_spark = "spark" in getattr(item, "fixturenames", ())
        group = "spark" if uses_spark else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=_start_order)  # stable: the order is kept within each rank


def _start_order(item: pytest.Item) -> int:
    """The Spark group first, then modules of slow tests (Spark jobs in processes of their own, the
    soak), then the rest: a long module started last would keep its worker busy after the other's end."""
    if "spark" in getattr(item, "fixturenames", ()):
        return 0
    return 1 if item.get_closest_marker("slow") else 2


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
