"""Broker RPCs that store messages: standard sends (10/310/320), the Arrow send, and a consumer's
send-back of a failed message (36)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import pyarrow as pa

from rocketspark.client.api.common import call
from rocketspark.message.batches.ipc import ipc_stream
from rocketspark.message.batches.schema import PRODUCER_SCHEMA
from rocketspark.message.ids import offset_msg_id
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand, next_opaque
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.headers.send import (
    ArrowSendResponseHeader,
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    encode_send_header,
)
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.client import RemotingClient


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


_STATUS = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(frozen=True, slots=True)
class SendResult:
    """What a broker acknowledged. Messages of a batch have consecutive queue offsets."""

    status: SendStatus
    msg_id: str  # the producer's UNIQ_KEY (comma-joined for a batch; the first one for an Arrow batch)
    offset_msg_id: str  # the broker's offset msgId(s), as msg_id (the first one for an Arrow batch)
    message_queue: MessageQueue
    queue_offset: int
    count: int = 1


def send_request(header: SendMessageRequestHeader, body: bytes, code: int, *, oneway: bool = False) -> RemotingCommand:
    return RemotingCommand(
        code=int(code),
        opaque=next_opaque(),
        flag=0x2 if oneway else 0,
        ext_fields=encode_send_header(header, code),
        body=body,
    )


async def send_message(
    client: RemotingClient,
    broker_addr: str,
    broker_name: str,
    header: SendMessageRequestHeader,
    body: bytes,
    *,
    msg_id: str,
    code: int = RequestCode.SEND_MESSAGE_V2,
    count: int = 1,
    timeout_s: float | None = None,
) -> SendResult:
    """One standard send (a single message, or a batch body with code SEND_BATCH_MESSAGE)."""
    response = await call(client, broker_addr, send_request(header, body, code), timeout_s, accept=tuple(_STATUS))
    answer = response.decode_header(SendMessageResponseHeader)
    return SendResult(
        _STATUS[ResponseCode(response.code)],
        msg_id,
        answer.msg_id,
        MessageQueue(header.topic, broker_name, answer.queue_id),
        answer.queue_offset,
        count,
    )


async def send_oneway(
    client: RemotingClient,
    broker_addr: str,
    header: SendMessageRequestHeader,
    body: bytes,
    timeout_s: float | None = None,
) -> None:
    await client.invoke_oneway(
        broker_addr, send_request(header, body, RequestCode.SEND_MESSAGE_V2, oneway=True), timeout_s
    )


async def send_arrow(
    client: RemotingClient,
    broker_addr: str,
    broker_name: str,
    header: SendMessageRequestHeader,
    batch: pa.RecordBatch,
    *,
    first_msg_id: str,
    timeout_s: float | None = None,
    code: int = ExtensionCode.ARROW_SEND_MESSAGE,
) -> SendResult:
    """The Arrow send extension (or, with `code` ARROW_SEND_HALF_MESSAGE, its batch of half
    messages); RequestCodeNotSupportedError from brokers without it.

    The broker answers the commit log offset of the batch's first message; with the broker's
    address (its store host, as in standard answers) that is the first message's offset msgId."""
    request = RemotingCommand(
        code=code,
        opaque=next_opaque(),
        ext_fields=header.to_ext_fields(),
        body_view=ipc_stream(PRODUCER_SCHEMA, [batch]),
    )
    response = await call(client, broker_addr, request, timeout_s, accept=tuple(_STATUS))
    answer = response.decode_header(ArrowSendResponseHeader)
    return SendResult(
        _STATUS[ResponseCode(response.code)],
        first_msg_id,
        offset_msg_id(broker_addr, answer.commit_log_offset),
        MessageQueue(header.topic, broker_name, answer.queue_id),
        answer.queue_offset,
        answer.count,
    )


async def send_back(
    client: RemotingClient,
    broker_addr: str,
    header: ConsumerSendMsgBackRequestHeader,
    timeout_s: float | None = None,
) -> None:
    """CONSUMER_SEND_MSG_BACK: the broker stores the failed message again for the group's retry
    topic (or its dead-letter topic); raises the ResponseError of a refusal."""
    request = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header)
    await call(client, broker_addr, request, timeout_s)
