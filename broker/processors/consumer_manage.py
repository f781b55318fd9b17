"""Consumer offsets and group membership: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15),
GET_CONSUMER_LIST_BY_GROUP (38)."""

from __future__ import annotations

from typing import Protocol

from broker.context import HasConsumerOffsets, HasConsumers, HasStore
from broker.managers.consumer_offset_manager import new_group_starts_at_first
from rocketspark.protocol.body.consumer import ConsumerListBody
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.client import ConsumerGroupRequestHeader
from rocketspark.protocol.headers.offset import (
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable


class ConsumerManageContext(HasStore, HasConsumerOffsets, HasConsumers, Protocol):
    """What ConsumerManageProcessor reads of the broker."""


class ConsumerManageProcessor:
    def __init__(self, broker: ConsumerManageContext) -> None:
        self.broker = broker

    def register(self, table: ProcessorTable) -> None:
        table.register(RequestCode.QUERY_CONSUMER_OFFSET, self.query_offset)
        table.register(RequestCode.UPDATE_CONSUMER_OFFSET, self.update_offset)
        table.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.consumer_list)

    def query_offset(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(QueryConsumerOffsetRequestHeader)
        offset = self.broker.consumer_offsets.query(header.consumer_group, header.topic, header.queue_id)
        if offset is not None:
            return request.response(header=OffsetResponseHeader(offset))
        if header.set_zero_if_not_found is False:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND, "Not found, do not set to zero, maybe this group boot first"
            )
        if new_group_starts_at_first(self.broker.store.min_offset(header.topic, header.queue_id)):
            return request.response(header=OffsetResponseHeader(0))
        return request.response(ResponseCode.QUERY_NOT_FOUND, "Not found, maybe this group consumer boot first")

    def update_offset(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(UpdateConsumerOffsetRequestHeader)
        self.broker.consumer_offsets.commit(header.consumer_group, header.topic, header.queue_id, header.commit_offset)
        return request.response()

    def consumer_list(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(ConsumerGroupRequestHeader)
        info = self.broker.consumers.groups.get(header.consumer_group)
        if info is None or not info.channels:
            return request.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {header.consumer_group}")
        return request.response(body=ConsumerListBody(info.client_ids()).to_json())
