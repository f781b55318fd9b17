"""What the in-process tests of the pop engine share: its context, a clock the tests move, sends.

The engine runs against the broker's real parts (tests/unit/processor_parts.py: a real MessageStore
on tmp_path); only time is the tests': invisible times pass when a test moves the clock, so no
test sleeps through them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from broker.config import BrokerConfig
from broker.managers.consumer_manager import ConsumerManager
from broker.managers.consumer_offset_manager import ConsumerOffsetManager
from broker.managers.subscription_group_manager import SubscriptionGroupManager
from broker.managers.topic_config_manager import TopicConfigManager
from broker.pop.filtering import EVERYTHING, MessageFilter
from broker.pop.receiving import Received, ReceiveRequest
from broker.pop.service import PopService
from broker.store.config import StoreConfig
from broker.store.message_store import MessageStore
from broker.store.writer.append_requests import StandardMessage
from rocketspark.message.properties import codec as props
from tests.unit.processor_parts import GROUP, TOPIC, BrokerParts, narrow


@dataclass(frozen=True)
class PopParts:
    """PopContext, of PopService."""

    config: BrokerConfig
    store_config: StoreConfig
    address: str
    store: MessageStore
    topics: TopicConfigManager
    subscription_groups: SubscriptionGroupManager
    consumer_offsets: ConsumerOffsetManager
    consumers: ConsumerManager


class Clock:
    """Epoch ms that move only when a test moves them."""

    def __init__(self) -> None:
        self.now = time.time_ns() // 1_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


async def started(parts: BrokerParts, clock: Callable[[], int]) -> PopService:
    service = PopService(narrow(PopParts, parts), clock=clock)
    await service.start()
    return service


async def send(
    parts: BrokerParts,
    body: bytes,
    *,
    queue_id: int = 0,
    tags: str | None = None,
    message_group: str | None = None,
    topic: str = TOPIC,
    properties: dict[str, str] | None = None,
) -> int:
    """Store one message (`properties`: user properties); its queue offset."""
    properties = {**(properties or {}), props.UNIQ_KEY: f"ID-{body.decode()}"}
    if tags is not None:
        properties[props.TAGS] = tags
    if message_group is not None:
        properties[props.SHARDING_KEY] = message_group
    message = StandardMessage(
        body,
        props.encode_properties(properties),
        tags=tags,
        uniq_key=properties[props.UNIQ_KEY],
        born_timestamp=time.time_ns() // 1_000_000,
        born_host="127.0.0.1:40000",
    )
    result = await parts.store.put_messages(topic, queue_id, [message])
    return result.first_queue_offset


async def receive(
    service: PopService,
    count: int = 32,
    *,
    invisible_ms: int = 10_000,
    group: str = GROUP,
    filter: MessageFilter = EVERYTHING,
    long_polling_ms: int = 0,
    **options: object,
) -> list[Received]:
    request = ReceiveRequest(
        group,
        TOPIC,
        count,
        invisible_ms,
        filter=filter,
        long_polling_ms=long_polling_ms,
        **options,  # type: ignore[arg-type]
    )
    return await service.receive(request)


def bodies(received: list[Received]) -> list[bytes]:
    return [r.row["body"] for r in received]
