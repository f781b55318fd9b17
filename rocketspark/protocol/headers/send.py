"""Headers of SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and the Arrow send.

There is one request header class. SEND_MESSAGE carries it under Java's long field names; V2 and
batch sends carry the same fields under one-letter names (Java's `SendMessageRequestHeaderV2`),
which :func:`decode_send_header` and :func:`encode_send_header` translate.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.header import CommandHeader


@dataclass(slots=True)
class SendMessageRequestHeader(CommandHeader):
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool | None = None
    max_reconsume_times: int | None = None
    batch: bool | None = None
    broker_name: str | None = None


#: SEND_MESSAGE_V2's one-letter name of each field (Java's SendMessageRequestHeaderV2)
V2_FIELD_NAMES = {
    "producerGroup": "a",
    "topic": "b",
    "defaultTopic": "c",
    "defaultTopicQueueNums": "d",
    "queueId": "e",
    "sysFlag": "f",
    "bornTimestamp": "g",
    "flag": "h",
    "properties": "i",
    "reconsumeTimes": "j",
    "unitMode": "k",
    "maxReconsumeTimes": "l",
    "batch": "m",
    "brokerName": "n",
}
_V1_NAMES = {short: long for long, short in V2_FIELD_NAMES.items()}


def decode_send_header(request: RemotingCommand) -> SendMessageRequestHeader:
    ext = request.ext_fields
    if request.code != RequestCode.SEND_MESSAGE and "b" in ext:
        ext = {_V1_NAMES.get(k, k): v for k, v in ext.items()}
    return SendMessageRequestHeader.from_ext_fields(ext)


def encode_send_header(header: SendMessageRequestHeader, code: int) -> dict[str, str]:
    ext = header.to_ext_fields()
    if code == RequestCode.SEND_MESSAGE:
        return ext
    return {V2_FIELD_NAMES.get(k, k): v for k, v in ext.items()}


@dataclass(slots=True)
class SendMessageResponseHeader(CommandHeader):
    msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None


@dataclass(slots=True)
class ArrowSendResponseHeader(CommandHeader):
    """Answer to an Arrow send: where the batch's first message went and how many were stored."""

    queue_id: int
    queue_offset: int
    count: int
    commit_log_offset: int


@dataclass(slots=True)
class ConsumerSendMsgBackRequestHeader(CommandHeader):
    """CONSUMER_SEND_MSG_BACK (36): store the message at commit log `offset` again for `group` to retry."""

    offset: int  # commit log offset of the failed message, as its record says
    group: str
    delay_level: int  # 0: the broker picks 3 + reconsume times; negative: straight to the dead-letter topic
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None
