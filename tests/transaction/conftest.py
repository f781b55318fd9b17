"""A name server and a broker with short transaction checks and the duplicate window off (so no
guarantee rests on the window), shared by a module; the same with a `flavor=apache` broker; a
recording transaction listener."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from rocketspark.client.config import ClientConfig
from rocketspark.client.producer.transaction import TransactionStatus
from rocketspark.message.message import Message, MessageExt
from rocketspark.processes import ServerProcess
from tests.harness import ServerFactory

#: checked 0.3 s after it was stored, every 0.3 s, at most 3 times
CHECKS = ("transactionTimeOut=300", "transactionCheckInterval=300", "transactionCheckMax=3")
BROKER_SETTINGS = tuple(
    arg
    for setting in (*CHECKS, "duplicateWindowSeconds=0", "registerNameServerPeriod=1000")
    for arg in ("--set", setting)
)


@dataclass(frozen=True)
class Cluster:
    namesrv: ServerProcess
    broker: ServerProcess

    def client_config(self) -> ClientConfig:
        """Heartbeats (which tell the broker where the producer group is) and routes every 0.2 s."""
        return ClientConfig(
            namesrv_addr=self.namesrv.address, heartbeat_broker_interval_ms=200, poll_name_server_interval_ms=200
        )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    factory = ServerFactory(tmp_path_factory.mktemp("transaction-cluster"))
    try:
        namesrv = factory.namesrv()
        yield Cluster(namesrv, factory.broker(namesrv.address, *BROKER_SETTINGS))
    finally:
        factory.stop_all()


#: flavor=apache: checked 1 s after its birth, a round every 0.5 s, at most 5 checks
APACHE_CHECKS = ("flavor=apache", "transactionTimeOut=1000", "transactionCheckInterval=500", "transactionCheckMax=5")


@pytest.fixture(scope="module")
def apache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A name server and a `flavor=apache` broker with short transaction checks, shared by a module."""
    factory = ServerFactory(tmp_path_factory.mktemp("apache-transactions"))
    settings = [arg for setting in (*APACHE_CHECKS, "registerNameServerPeriod=1000") for arg in ("--set", setting)]
    try:
        namesrv = factory.namesrv()
        yield Cluster(namesrv, factory.broker(namesrv.address, *settings))
    finally:
        factory.stop_all()


@dataclass
class RecordingListener:
    """Answers `execute` for the local transaction and `check` for the broker's checks; records the
    calls. `release` (when set) holds the local transaction until the test sets it."""

    execute: TransactionStatus
    check: Callable[[MessageExt], TransactionStatus] = lambda _: TransactionStatus.UNKNOWN
    release: threading.Event | None = None
    executed: list[tuple[Message, Any]] = field(default_factory=list)
    checked: list[MessageExt] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)
    threads: set[str] = field(default_factory=set)

    def execute_local_transaction(self, message: Message, arg: Any) -> TransactionStatus:
        self.executed.append((message, arg))
        self.threads.add(threading.current_thread().name)
        self.started.set()
        if self.release is not None:
            assert self.release.wait(30), "the test never released the local transaction"
        return self.execute

    def check_local_transaction(self, message: MessageExt) -> TransactionStatus:
        self.checked.append(message)
        self.threads.add(threading.current_thread().name)
        return self.check(message)
