"""What the Spark side asks RocketMQ: queues, their offsets, and the consumer group's offsets.

Every Python process (the driver's source runner, each executor's Python worker) keeps one client
per name-server list on the process's shared event-loop thread, reused by every task; nothing relies
on Spark calling `stop()`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

from rocketspark.client.api import offset as offset_api
from rocketspark.client.api.route import get_all_topics, get_cluster_info
from rocketspark.client.config import ClientConfig
from rocketspark.client.instance import ClientInstance, ConsumerRegistration
from rocketspark.client.routes import subscribe_queues
from rocketspark.client.sync import shared_loop
from rocketspark.errors import RocketMQError, TopicNotExistError
from rocketspark.message.filter import build_subscription
from rocketspark.message.queue import MessageQueue
from rocketspark.message.validation import is_system_topic
from rocketspark.remoting.body.heartbeat import ConsumerData, ConsumeType, MessageModel
from rocketspark.remoting.codes import ResponseCode
from rocketspark.spark.options import SourceOptions

log = logging.getLogger(__name__)

T = TypeVar("T")

_instances: dict[str, ClientInstance] = {}
_lock = threading.Lock()
#: the longest a single question to the cluster may take before it is an error
QUERY_TIMEOUT_S = 30.0


def run(coroutine: Coroutine[Any, Any, T], timeout_s: float | None = QUERY_TIMEOUT_S) -> T:
    """Run on the process's event-loop thread and wait for the result."""
    return shared_loop().run(coroutine, timeout_s)


def instance(namesrv_addr: str) -> ClientInstance:
    """This process's client for these name servers, started on first use and kept for its life."""
    with _lock:
        found = _instances.get(namesrv_addr)
        if found is None or found.state.name != "RUNNING":
            found = run(ClientInstance.acquire(ClientConfig(namesrv_addr=namesrv_addr)))
            _instances[namesrv_addr] = found
        return found


async def _gather(queues: Iterable[MessageQueue], ask: Callable[[MessageQueue], Awaitable[T]]) -> dict[MessageQueue, T]:
    ordered = sorted(queues)
    answers = await asyncio.gather(*(ask(q) for q in ordered))
    return dict(zip(ordered, answers, strict=True))


class QueueView:
    """The queues a source reads and their offsets, as the brokers see them now."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.client = instance(options.namesrv_addr)

    async def _address(self, queue: MessageQueue) -> str:
        return await self.client.broker_address(queue.broker_name, queue.topic)

    def topics(self) -> list[str]:
        """The topics to read: the named ones, or those the name server lists that match the pattern."""
        pattern = self.options.pattern()
        if pattern is None:
            return list(self.options.topics)

        async def matching() -> list[str]:
            listed = await get_all_topics(self.client.remoting, self.client.namesrv.current)
            return sorted(t for t in listed if pattern.fullmatch(t) and not is_system_topic(t))

        return run(matching())

    def queues(self, *, must_exist: bool) -> list[MessageQueue]:
        """Every readable queue of the topics, sorted; an unknown topic is an error if `must_exist`."""

        topics = self.topics()

        async def resolve() -> list[MessageQueue]:
            found: list[MessageQueue] = []
            for topic in topics:
                route = await self.client.fetch_route(topic)
                if route is None:
                    if must_exist:
                        raise TopicNotExistError(
                            f"topic {topic} does not exist: the name server {self.client.namesrv.current} "
                            "has no route for it",
                            code=ResponseCode.TOPIC_NOT_EXIST,
                        )
                    continue
                found.extend(subscribe_queues(topic, route))
            return sorted(found)

        return run(resolve())

    def live_brokers(self) -> set[str]:
        """Names of the brokers registered with the name servers now, with a master."""
        info = run(get_cluster_info(self.client.remoting, self.client.namesrv.current))
        return {name for name, data in info.broker_addr_table.items() if data.master_address}

    def max_offsets(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        async def ask(queue: MessageQueue) -> int:
            return await offset_api.get_max_offset(
                self.client.remoting, await self._address(queue), queue.topic, queue.queue_id
            )

        return run(_gather(queues, ask))

    def min_offsets(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        async def ask(queue: MessageQueue) -> int:
            return await offset_api.get_min_offset(
                self.client.remoting, await self._address(queue), queue.topic, queue.queue_id
            )

        return run(_gather(queues, ask))

    def offsets_for_timestamp(self, queues: Iterable[MessageQueue], timestamp_ms: int) -> dict[MessageQueue, int]:
        async def ask(queue: MessageQueue) -> int:
            address = await self._address(queue)
            return await offset_api.search_offset(
                self.client.remoting, address, queue.topic, queue.queue_id, timestamp_ms
            )

        return run(_gather(queues, ask))

    def group_offsets(self, group: str, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int | None]:
        """The group's committed offsets; None where it has none (asked with setZeroIfNotFound=false)."""

        async def ask(queue: MessageQueue) -> int | None:
            address = await self._address(queue)
            return await offset_api.query_consumer_offset(
                self.client.remoting, address, group, queue.topic, queue.queue_id, set_zero_if_not_found=False
            )

        return run(_gather(queues, ask))

    def commit_group_offsets(self, group: str, offsets: dict[MessageQueue, int]) -> None:
        """Mirror offsets into the group's consumer offsets; failures are logged, never raised:
        the checkpoint, not the broker, is the source of truth."""

        async def update(queue: MessageQueue) -> None:
            try:
                address = await self._address(queue)
                await offset_api.update_consumer_offset(
                    self.client.remoting, address, group, queue.topic, queue.queue_id, offsets[queue], oneway=False
                )
            except RocketMQError as exc:
                log.warning("mirroring offset %d of %s to group %s failed: %s", offsets[queue], queue, group, exc)

        run(_gather(offsets, update))


_heartbeaten: dict[tuple[str, str], frozenset[str]] = {}


def keep_group_alive(options: SourceOptions, topics: Callable[[], Iterable[str]]) -> None:
    """Heartbeat the source's consumer group (CONSUME_ACTIVELY) so RocketMQ's tools list it.

    The group is registered with the process's client once, whose heartbeats then reach every
    broker it knows every 30 s; a broker the client did not know at its last heartbeat here is
    told at once (call this after resolving the queues, which is when brokers become known).
    """
    assert options.consumer_group is not None
    group = options.consumer_group
    key = (options.namesrv_addr, group)
    client = instance(options.namesrv_addr)

    def consumer_data() -> ConsumerData:  # what each heartbeat says of the group
        return ConsumerData(
            group,
            consume_type=ConsumeType.CONSUME_ACTIVELY,
            message_model=MessageModel.CLUSTERING,
            subscription_data_set=[build_subscription(t, options.tags) for t in sorted(topics())],
        )

    with _lock:
        told = _heartbeaten.get(key)
        if told is None:  # first call in this process: register the group once
            client.register_consumer(ConsumerRegistration(group, consumer_data, topics))
            told = frozenset()
        known = frozenset(client.broker_addresses.values())
        if known <= told:
            return
        _heartbeaten[key] = known
    run(client.heartbeat())
