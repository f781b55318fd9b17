"""Offset RPCs: the group's committed offsets, the queue's min/max/time-indexed offsets, and (the
bundled broker's extension) the offset a budget of body bytes reaches."""

from __future__ import annotations

from rocketspark.client.api.common import call
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.headers.offset import (
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueueRequestHeader,
    SearchOffsetRequestHeader,
    TimestampResponseHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rocketspark.protocol.headers.queue_bytes import QueueBodyBytesRequestHeader, QueueBodyBytesResponseHeader
from rocketspark.remoting.client import RemotingClient


async def query_consumer_offset(
    client: RemotingClient,
    broker_addr: str,
    group: str,
    topic: str,
    queue_id: int,
    *,
    set_zero_if_not_found: bool | None = None,
    timeout_s: float | None = None,
) -> int | None:
    """The group's committed offset (next to consume), None when the broker has none."""
    header = QueryConsumerOffsetRequestHeader(group, topic, queue_id, set_zero_if_not_found)
    request = RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, header)
    response = await call(
        client, broker_addr, request, timeout_s, accept=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND)
    )
    if response.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    return response.decode_header(OffsetResponseHeader).offset


async def update_consumer_offset(
    client: RemotingClient,
    broker_addr: str,
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    oneway: bool = True,
    timeout_s: float | None = None,
) -> None:
    """Commit the next offset to consume; oneway as Java's persistAll does it."""
    header = UpdateConsumerOffsetRequestHeader(group, topic, queue_id, offset)
    request = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header, oneway=oneway)
    if oneway:
        await client.invoke_oneway(broker_addr, request, timeout_s)
    else:
        await call(client, broker_addr, request, timeout_s)


async def _queue_offset(
    client: RemotingClient, broker_addr: str, code: RequestCode, topic: str, queue_id: int, timeout_s: float | None
) -> int:
    response = await call(
        client, broker_addr, RemotingCommand.request(code, QueueRequestHeader(topic, queue_id)), timeout_s
    )
    return response.decode_header(OffsetResponseHeader).offset


async def get_max_offset(
    client: RemotingClient, broker_addr: str, topic: str, queue_id: int, timeout_s: float | None = None
) -> int:
    """The next offset to be written in the queue (its message count, retention aside)."""
    return await _queue_offset(client, broker_addr, RequestCode.GET_MAX_OFFSET, topic, queue_id, timeout_s)


async def get_min_offset(
    client: RemotingClient, broker_addr: str, topic: str, queue_id: int, timeout_s: float | None = None
) -> int:
    return await _queue_offset(client, broker_addr, RequestCode.GET_MIN_OFFSET, topic, queue_id, timeout_s)


async def search_offset(
    client: RemotingClient,
    broker_addr: str,
    topic: str,
    queue_id: int,
    timestamp_ms: int,
    timeout_s: float | None = None,
) -> int:
    """The broker's answer for `timestamp_ms`: the bundled broker's is the first offset stored at
    or after it, Apache's the entry nearest it; `rocketspark.client.consumer.time_offsets.offset_for_time`
    turns either into the first offset stored at or after it."""
    header = SearchOffsetRequestHeader(topic, queue_id, timestamp_ms)
    response = await call(
        client, broker_addr, RemotingCommand.request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header), timeout_s
    )
    return response.decode_header(OffsetResponseHeader).offset


async def earliest_store_time(
    client: RemotingClient, broker_addr: str, topic: str, queue_id: int, timeout_s: float | None = None
) -> int:
    request = RemotingCommand.request(RequestCode.GET_EARLIEST_MSG_STORETIME, QueueRequestHeader(topic, queue_id))
    response = await call(client, broker_addr, request, timeout_s)
    return response.decode_header(TimestampResponseHeader).timestamp


async def body_bytes_end(
    client: RemotingClient,
    broker_addr: str,
    topic: str,
    queue_id: int,
    start: int,
    end: int,
    max_bytes: int,
    timeout_s: float | None = None,
) -> int:
    """The first offset past the messages from `start` whose stored body sizes add up to at most
    `max_bytes` (at most `end`): QUEUE_BODY_BYTES (31003), which the bundled broker answers from the
    sizes its queue entries carry; other brokers answer REQUEST_CODE_NOT_SUPPORTED
    (RequestCodeNotSupportedError)."""
    header = QueueBodyBytesRequestHeader(topic, queue_id, start, end, max_bytes)
    response = await call(
        client, broker_addr, RemotingCommand.request(ExtensionCode.QUEUE_BODY_BYTES, header), timeout_s
    )
    return response.decode_header(QueueBodyBytesResponseHeader).end_offset
