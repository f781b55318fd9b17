"""The Spark side's connection to RocketMQ: one client per process.

Every Python process (the driver's source runner, each executor's Python worker) keeps one client
per name-server list, credentials and TLS settings on the process's shared event-loop thread, reused by every task;
nothing relies on Spark calling `stop()`. The sink's producers, cached per process too, are closed once
no task used them for `PRODUCER_IDLE_S` (`close_producer`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from rocketspark.client.config import ClientConfig
from rocketspark.client.instance import ClientInstance
from rocketspark.client.lifecycle import ServiceState
from rocketspark.client.producer.producer import AsyncProducer
from rocketspark.client.sync import shared_loop
from rocketspark.errors import RocketMQError
from rocketspark.remoting.signing import SessionCredentials
from rocketspark.spark.options import SourceOptions
from rocketspark.spark.process_cache import ProcessCache

T = TypeVar("T")

log = logging.getLogger(__name__)

#: what tells one process client from another: name servers, credentials and TLS settings
Connection = tuple[str, SessionCredentials | None, bool, str | None]

_instances: ProcessCache[Connection, ClientInstance] = ProcessCache(
    alive=lambda found: found.state is ServiceState.RUNNING
)
_lock = threading.Lock()  # the heartbeat registrations below
#: the longest a single question to the cluster may take before it is an error
QUERY_TIMEOUT_S = 30.0
#: a sink's producer that no task of this process used for this long is closed (that of a query that
#: finished, or that no longer writes here): Spark's Kafka producer cache's default timeout, 10 minutes
PRODUCER_IDLE_S = 600.0
#: the longest closing an idle producer may take (it tells each broker it leaves, 1 s each at most)
CLOSE_TIMEOUT_S = 10.0


def run(coroutine: Coroutine[Any, Any, T], timeout_s: float | None = QUERY_TIMEOUT_S) -> T:
    """Run on the process's event-loop thread and wait for the result."""
    return shared_loop().run(coroutine, timeout_s)


def submit(coroutine: Coroutine[Any, Any, T]) -> Future[T]:
    """Start on the process's event-loop thread; the caller collects the result later."""
    return asyncio.run_coroutine_threadsafe(coroutine, shared_loop().loop)


def instance(
    namesrv_addr: str,
    credentials: SessionCredentials | None = None,
    use_tls: bool = False,
    tls_trust: str | None = None,
) -> ClientInstance:
    """This process's client for these name servers, signing with `credentials` when given, over TLS
    with `use_tls`, started on first use and kept for its life."""

    def start() -> ClientInstance:
        config = ClientConfig(namesrv_addr=namesrv_addr, credentials=credentials, use_tls=use_tls, tls_trust=tls_trust)
        return run(ClientInstance.acquire(config))

    return _instances.get((namesrv_addr, credentials, use_tls, tls_trust), start)


def connection_of(options: SourceOptions) -> Connection:
    """The source's name servers, credentials and TLS settings: the key of its process client."""
    return (options.namesrv_addr, options.credentials, options.use_tls, options.tls_trust)


def source_instance(options: SourceOptions) -> ClientInstance:
    """This process's client for the source's name servers, credentials and TLS settings."""
    return instance(*connection_of(options))


def close_producer(producer: AsyncProducer) -> None:
    """Shut an idle producer down (unregistered from its group and its brokers, its client
    released); a failure is logged, the producer forgotten all the same."""
    try:
        run(producer.shutdown(), CLOSE_TIMEOUT_S)
    except (RocketMQError, OSError, TimeoutError) as exc:
        log.warning("closing the idle producer of group %s failed: %s", producer.group, exc)
    else:
        log.info("closed the producer of group %s: no task used it for %.0f s", producer.group, PRODUCER_IDLE_S)
