"""Queue offsets and consumption progress: SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30),
GET_MIN_OFFSET (31), GET_EARLIEST_MSG_STORETIME (32), GET_CONSUME_STATS (208), and the extension
QUEUE_BODY_BYTES (31003, off with arrowEnable=false like the other extensions).

The time search answers the first offset stored at or after the time; with flavor=apache, Apache
4.9's nearest entry (broker.flavor.nearest_entry)."""

from __future__ import annotations

from typing import Protocol

from broker.context import HasConfig, HasConsumerOffsets, HasStore, HasTopics
from broker.flavor import Flavor, nearest_entry
from rocketspark.protocol.body.stats import ConsumeStats, OffsetWrapper
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.headers.admin import GetConsumeStatsRequestHeader
from rocketspark.protocol.headers.offset import (
    OffsetResponseHeader,
    QueueRequestHeader,
    SearchOffsetRequestHeader,
    TimestampResponseHeader,
)
from rocketspark.protocol.headers.queue_bytes import QueueBodyBytesRequestHeader, QueueBodyBytesResponseHeader
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable


class OffsetAdminContext(HasConfig, HasTopics, HasStore, HasConsumerOffsets, Protocol):
    """What OffsetAdminProcessor reads of the broker."""


class TimeSearchContext(HasConfig, HasStore, Protocol):
    """What a time search reads of the broker."""


async def offset_of_time(broker: TimeSearchContext, topic: str, queue_id: int, timestamp: int) -> int:
    """The broker's answer for a time: the first offset stored at or after it; with flavor=apache,
    Apache 4.9's nearest entry (as SEARCH_OFFSET_BY_TIMESTAMP and a reset by time answer)."""
    store = broker.store
    if broker.config.flavor is Flavor.apache:
        return await nearest_entry(
            lambda offset: store.store_time_at(topic, queue_id, offset),
            store.min_offset(topic, queue_id),
            store.max_offset(topic, queue_id),
            timestamp,
        )
    return await store.offset_for_timestamp(topic, queue_id, timestamp)


class OffsetAdminProcessor:
    def __init__(self, broker: OffsetAdminContext) -> None:
        self.broker = broker

    def register(self, table: ProcessorTable) -> None:
        table.register(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, self.search_offset)
        table.register(RequestCode.GET_MAX_OFFSET, self.max_offset)
        table.register(RequestCode.GET_MIN_OFFSET, self.min_offset)
        table.register(RequestCode.GET_EARLIEST_MSG_STORETIME, self.earliest_store_time)
        table.register(RequestCode.GET_CONSUME_STATS, self.consume_stats)
        if self.broker.config.arrow_enable:
            table.register(ExtensionCode.QUEUE_BODY_BYTES, self.body_bytes)

    async def search_offset(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(SearchOffsetRequestHeader)
        offset = await offset_of_time(self.broker, header.topic, header.queue_id, header.timestamp)
        return request.response(header=OffsetResponseHeader(offset))

    async def body_bytes(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(QueueBodyBytesRequestHeader)
        end, taken = await self.broker.store.body_bytes(
            header.topic, header.queue_id, header.offset, header.end_offset, header.max_bytes
        )
        return request.response(header=QueueBodyBytesResponseHeader(end, taken))

    def max_offset(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(QueueRequestHeader)
        return request.response(
            header=OffsetResponseHeader(self.broker.store.max_offset(header.topic, header.queue_id))
        )

    def min_offset(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(QueueRequestHeader)
        return request.response(
            header=OffsetResponseHeader(self.broker.store.min_offset(header.topic, header.queue_id))
        )

    async def earliest_store_time(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(QueueRequestHeader)
        timestamp = await self.broker.store.earliest_store_time(header.topic, header.queue_id)
        return request.response(header=TimestampResponseHeader(timestamp))

    async def consume_stats(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(GetConsumeStatsRequestHeader)
        broker = self.broker
        offsets = broker.consumer_offsets
        topics = [header.topic] if header.topic else offsets.topics_of_group(header.consumer_group)
        stats = ConsumeStats()
        for topic in topics:
            config = broker.topics.get(topic)
            if config is None:
                continue
            committed = offsets.offsets(header.consumer_group, topic)
            for queue_id in range(config.read_queue_nums):
                consumer_offset = committed.get(queue_id, 0)
                stats.offset_table[MessageQueue(topic, broker.config.broker_name, queue_id)] = OffsetWrapper(
                    broker_offset=broker.store.max_offset(topic, queue_id),
                    consumer_offset=consumer_offset,
                    pull_offset=consumer_offset,
                    last_timestamp=await broker.store.store_time_at(topic, queue_id, consumer_offset - 1),
                )
        return request.response(body=stats.to_json())
