"""Message lookup: QUERY_MESSAGE (12) by key or unique key, VIEW_MESSAGE_BY_ID (33) by offset msgId.

Under ACL, VIEW_MESSAGE_BY_ID names no topic for the access check to read, and an offset msgId can
walk the whole commit log: the message found is answered only when the signing account has SUB on
its topic, else exactly as an offset without a message (a refusal naming the topic would map every
message's topic); the refusal is logged.
"""

from __future__ import annotations

from typing import Any, Protocol

import pyarrow as pa

from broker.acl.guard import GuardedProcessorTable
from broker.acl.permission import Perm
from broker.acl.resources import Needs, on_topic
from broker.context import HasAddress, HasStore
from rocketspark.message.batches.schema import STORED_SCHEMA
from rocketspark.message.records.encoding import encode_records
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.admin import (
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    ViewMessageRequestHeader,
)
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable
from rocketspark.remoting.signing import UNIQUE_KEY_QUERY


class QueryMessageContext(HasStore, HasAddress, Protocol):
    """What QueryMessageProcessor reads of the broker."""


class QueryMessageProcessor:
    def __init__(self, broker: QueryMessageContext) -> None:
        self.broker = broker
        self._acl: GuardedProcessorTable | None = None

    def register(self, table: ProcessorTable) -> None:
        if isinstance(table, GuardedProcessorTable):  # ACL on: a viewed message's topic is checked too
            self._acl = table
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
        body = self._records(found)
        last_ts = max(int(m["store_timestamp"]) for m in found)
        return request.response(header=QueryMessageResponseHeader(last_ts, store.commit_log.max_offset), body=body)

    async def view_message(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(ViewMessageRequestHeader)
        message = await self.broker.store.message_at(header.offset)
        if message is None or (
            self._acl is not None
            and self._acl.refusal(connection, request, Needs((on_topic(str(message["topic"]), Perm.SUB),)))
        ):
            return request.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {header.offset}")
        return request.response(body=self._records([message]))

    def _records(self, messages: list[dict[str, Any]]) -> bytes:
        """STORED_SCHEMA rows as the message records of a response body."""
        return encode_records(pa.RecordBatch.from_pylist(messages, schema=STORED_SCHEMA), self.broker.address)
