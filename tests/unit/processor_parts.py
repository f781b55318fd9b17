"""What the in-process processor tests share: the broker's real parts without a controller.

`open_parts` builds the managers and a real MessageStore on a temporary directory, wired as
BrokerController.start wires them (the store's arrivals wake held pulls) but with no server, no
name server registration and no periodic services; the store is stopped when the block ends.
Each processor gets a context holding only the parts its Protocol in broker/context.py declares
(`narrow`), and requests are handled as Connection._dispatch handles them (`handle`), with a fake
channel in place of the connection.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from broker.config import BrokerConfig
from broker.managers.consumer_manager import ConsumerManager
from broker.managers.consumer_offset_manager import ConsumerOffsetManager
from broker.managers.producer_manager import ProducerManager
from broker.managers.subscription_group_manager import SubscriptionGroupManager
from broker.managers.topic_config_manager import TopicConfigManager
from broker.pull_request_hold_service import PullRequestHoldService
from broker.schedule.delay_levels import DelayLevels
from broker.schedule.parking import Parking
from broker.stats import BrokerStats
from broker.store.config import StoreConfig
from broker.store.message_store import MessageStore
from broker.transaction.service import CheckSettings, TransactionService
from rocketspark.errors import RocketMQError
from rocketspark.fileutil import AtomicFileWriter
from rocketspark.message.message import MessageExt
from rocketspark.message.properties.codec import encode_properties
from rocketspark.message.records.decoding import decode_records
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.pull import FLAG_SUBSCRIPTION, PullMessageRequestHeader
from rocketspark.protocol.headers.send import SendMessageRequestHeader, encode_send_header
from rocketspark.remoting.processor import ProcessorTable

#: the broker's "ip:port" (its store host), as offset msgIds name it
ADDRESS = "127.0.0.1:10911"
#: a topic of four queues every test may use
TOPIC = "InProcessTopic"
QUEUES = 4
GROUP = "in-process-consumers"
PRODUCER_GROUP = "in-process-producers"
BORN_MS = 1_700_000_000_000


@dataclass
class FakeChannel:
    """What a processor reads of the connection a request came on."""

    remote_address: str = "127.0.0.1:54321"
    local_address: str = ADDRESS
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class BrokerParts:
    """Every part a processor context may name (broker/context.py), real, as the controller builds them."""

    config: BrokerConfig
    store_config: StoreConfig
    address: str
    store: MessageStore
    stats: BrokerStats
    topics: TopicConfigManager
    subscription_groups: SubscriptionGroupManager
    consumer_offsets: ConsumerOffsetManager
    consumers: ConsumerManager
    producers: ProducerManager
    hold: PullRequestHoldService
    delay_levels: DelayLevels
    parking: Parking
    transactions: TransactionService


# The contexts the processors are given: each holds exactly what its processor's Protocol declares
# (test_processors_in_process.py checks that they match), frozen as the Protocols are read-only.


@dataclass(frozen=True)
class SendParts:
    """SendContext, of SendMessageProcessor (SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE)."""

    config: BrokerConfig
    store_config: StoreConfig
    address: str
    topics: TopicConfigManager
    subscription_groups: SubscriptionGroupManager
    parking: Parking
    store: MessageStore
    stats: BrokerStats


@dataclass(frozen=True)
class PullParts:
    """PullContext, of PullMessageProcessor (PULL_MESSAGE)."""

    config: BrokerConfig
    address: str
    topics: TopicConfigManager
    subscription_groups: SubscriptionGroupManager
    consumer_offsets: ConsumerOffsetManager
    consumers: ConsumerManager
    store: MessageStore
    stats: BrokerStats
    hold: PullRequestHoldService


@dataclass(frozen=True)
class ConsumerManageParts:
    """ConsumerManageContext, of ConsumerManageProcessor (QUERY_ and UPDATE_CONSUMER_OFFSET)."""

    store: MessageStore
    consumer_offsets: ConsumerOffsetManager
    consumers: ConsumerManager


@dataclass(frozen=True)
class OffsetAdminParts:
    """OffsetAdminContext, of OffsetAdminProcessor (GET_MAX_/GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP)."""

    config: BrokerConfig
    topics: TopicConfigManager
    store: MessageStore
    consumer_offsets: ConsumerOffsetManager


@dataclass(frozen=True)
class EndTransactionParts:
    """EndTransactionContext, of EndTransactionProcessor (END_TRANSACTION, END_TRANSACTION_RANGE)."""

    transactions: TransactionService
    store: MessageStore
    config: BrokerConfig


@asynccontextmanager
async def open_parts(root: Path, **settings: Any) -> AsyncIterator[BrokerParts]:
    """The broker's parts on `root` (`settings`: BrokerConfig fields), with TOPIC created."""
    config = BrokerConfig(**settings)
    store_config = StoreConfig(store_path_root_dir=root / "store")
    io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-config-io")
    writers = [
        AtomicFileWriter(root / "config" / name, io)
        for name in ("topics.json", "subscriptionGroup.json", "consumerOffset.json", "transaction.json")
    ]
    topics_writer, groups_writer, offsets_writer, transaction_writer = writers
    store = MessageStore(store_config, ADDRESS)
    await store.start()
    try:
        topics = TopicConfigManager(config, topics_writer, lambda: None)
        topics.load()
        topics.put(TopicConfig(TOPIC, QUEUES, QUEUES))
        producers = ProducerManager(config.channel_expired_timeout)
        hold = PullRequestHoldService(config.max_held_pull_requests)
        store.add_arrival_listener(hold.notify)
        checks = CheckSettings(
            config.transaction_time_out, config.transaction_check_interval, config.transaction_check_max
        )
        transactions = TransactionService(
            store, producers, checks, transaction_writer, lambda topic: topics.create_internal_topic(topic, 1)
        )
        await transactions.load()  # not started: no periodic check runs
        levels = DelayLevels(store_config.delay_levels_ms())
        try:
            yield BrokerParts(
                config=config,
                store_config=store_config,
                address=ADDRESS,
                store=store,
                stats=BrokerStats(),
                topics=topics,
                subscription_groups=SubscriptionGroupManager(groups_writer, config.auto_create_subscription_group),
                consumer_offsets=ConsumerOffsetManager(offsets_writer),
                consumers=ConsumerManager(config.channel_expired_timeout, lambda group: None),
                producers=producers,
                hold=hold,
                delay_levels=levels,
                parking=Parking(levels, timer_max_delay_s=store_config.timer_max_delay_sec),
                transactions=transactions,
            )
        finally:
            await transactions.stop()
    finally:
        await store.stop()
        for writer in writers:
            await writer.flush()
        io.shutdown(wait=True)


C = TypeVar("C")


def narrow(context_type: type[C], parts: BrokerParts) -> C:
    """A `context_type` (a dataclass of some of BrokerParts' fields) holding those parts of `parts`."""
    return context_type(**{f.name: getattr(parts, f.name) for f in dataclasses.fields(context_type)})  # type: ignore[arg-type]


def protocol_members(protocol: type) -> set[str]:
    """The properties a context Protocol declares, through the broker/context.py protocols it combines."""
    return {
        name
        for base in protocol.__mro__
        if base.__module__ == "broker.context"
        for name, value in vars(base).items()
        if isinstance(value, property)
    }


def registered(*processors: Any) -> ProcessorTable:
    """A table the processors registered their request codes in, as BrokerController.start has them do."""
    table = ProcessorTable()
    for processor in processors:
        processor.register(table)
    return table


async def handle(table: ProcessorTable, channel: FakeChannel, request: RemotingCommand) -> RemotingCommand:
    """Handle `request` as a broker connection does: the handler registered for its code, called with
    the channel; an awaitable result awaited; a refusal (RocketMQError) answered with its code."""
    handler = table.get(request.code)
    assert handler is not None, f"no processor registered for request code {request.code}"
    try:
        result = handler(channel, request)  # type: ignore[arg-type]
        response = await result if inspect.isawaitable(result) else result
    except RocketMQError as exc:
        response = request.response(exc.code if exc.code is not None else ResponseCode.SYSTEM_ERROR, str(exc))
    assert isinstance(response, RemotingCommand)
    assert response.opaque == request.opaque and response.is_response
    return response


def send_request(
    body: bytes,
    *,
    topic: str = TOPIC,
    queue_id: int = 0,
    tags: str | None = None,
    keys: str | None = None,
    uniq_key: str | None = None,
    extra: dict[str, str] | None = None,
    sys_flag: int = 0,
    code: int = RequestCode.SEND_MESSAGE,
) -> RemotingCommand:
    """A send as a producer builds it; V2 and batch sends carry the header's one-letter names."""
    properties = {"WAIT": "true"}
    for name, value in (("TAGS", tags), ("KEYS", keys), ("UNIQ_KEY", uniq_key)):
        if value is not None:
            properties[name] = value
    properties.update(extra or {})
    header = SendMessageRequestHeader(
        producer_group=PRODUCER_GROUP,
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=QUEUES,
        queue_id=queue_id,
        sys_flag=sys_flag,
        born_timestamp=BORN_MS,
        flag=0,
        properties=encode_properties(properties),
        reconsume_times=0,
        batch=code == RequestCode.SEND_BATCH_MESSAGE,
    )
    request = RemotingCommand.request(code, header, body)
    request.ext_fields = encode_send_header(header, code)
    return request


def pull_request(
    offset: int,
    *,
    topic: str = TOPIC,
    queue_id: int = 0,
    group: str = GROUP,
    expression: str = "*",
    max_messages: int = 32,
    flags: int = FLAG_SUBSCRIPTION,
    commit_offset: int = 0,
    suspend_ms: int = 0,
) -> RemotingCommand:
    """A PULL_MESSAGE as a consumer builds it (with its subscription, as the client's puller sends it)."""
    header = PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=max_messages,
        sys_flag=flags,
        commit_offset=commit_offset,
        suspend_timeout_millis=suspend_ms,
        sub_version=0,
        subscription=expression,
        expression_type="TAG",
    )
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header)


def pulled(response: RemotingCommand) -> list[MessageExt]:
    """The messages of a pull's answer, decoded as a client decodes them."""
    return decode_records(response.wire_body)
