"""Message lookup: QUERY_MESSAGE (12) by key or unique key, VIEW_MESSAGE_BY_ID (33) by offset msgId."""

from __future__ import annotations

from typing import Protocol

from broker.context import HasAddress, HasStore
from rocketspark.message.record_encoding import encode_records
from rocketspark.remoting.codes import RequestCode, ResponseCode
from rocketspark.remoting.command import RemotingCommand
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.headers.admin import (
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    ViewMessageRequestHeader,
)
from rocketspark.remoting.processor import ProcessorTable


class QueryMessageContext(HasStore, HasAddress, Protocol):
    """What QueryMessageProcessor reads of the broker."""


UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


class QueryMessageProcessor:
    def __init__(self, broker: QueryMessageContext) -> None:
        self.broker = broker

    def register(self, table: ProcessorTable) -> None:
        table.register(RequestCode.QUERY_MESSAGE, self.query_message)
        table.register(RequestCode.VIEW_MESSAGE_BY_ID, self.view_message)

    async def query_message(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(QueryMessageRequestHeader)
        unique = request.ext_fields.get(UNIQUE_KEY_QUERY, "false").lower() == "true"
        store = self.broker.store
        found = await store.query_by_key(
            header.topic,
            header.key,
            max(1, header.max_num),
            header.begin_timestamp,
            header.end_timestamp,
            unique_key=unique,
        )
        if not found:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND,
                f"can not find message with key {header.key!r} in topic {header.topic}, maybe time range not correct",
            )
        body = b"".join(encode_records(message, self.broker.address) for message in found)
        last_ts = max(int(m.column("store_timestamp")[0].as_py()) for m in found)
        return request.response(header=QueryMessageResponseHeader(last_ts, store.commit_log.max_offset), body=body)

    async def view_message(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(ViewMessageRequestHeader)
        message = await self.broker.store.message_at(header.offset)
        if message is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {header.offset}")
        return request.response(body=encode_records(message, self.broker.address))
