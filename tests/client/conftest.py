from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from rocketspark.processes import ServerProcess
from tests.harness import ServerFactory


@dataclass(frozen=True)
class Cluster:
    namesrv: ServerProcess
    broker: ServerProcess

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.address


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A name server and a broker shared by a test module (tests use topics of their own)."""
    factory = ServerFactory(tmp_path_factory.mktemp("client-cluster"))
    try:
        namesrv = factory.namesrv()
        yield Cluster(namesrv, factory.broker(namesrv.address, "--set", "registerNameServerPeriod=1000"))
    finally:
        factory.stop_all()
