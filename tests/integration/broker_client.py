"""Small request builders the broker tests share (over the client's RPC layer)."""

from __future__ import annotations

import time

from rocketspark.client.api.pull import PullResult, pull_message
from rocketspark.client.api.send import SendResult, send_message
from rocketspark.message.message import MessageExt
from rocketspark.message.properties.codec import encode_properties
from rocketspark.message.records.batch_body import BatchColumns, encode_batch_body
from rocketspark.message.records.decoding import decode_records
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.headers.pull import (
    FLAG_COMMIT_OFFSET,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
    PullMessageRequestHeader,
)
from rocketspark.protocol.headers.send import SendMessageRequestHeader
from rocketspark.remoting.client import RemotingClient

BROKER_NAME = "broker-a"


def properties(tags: str | None = None, keys: str | None = None, **extra: str) -> str:
    values = dict(extra)
    if tags:
        values["TAGS"] = tags
    if keys:
        values["KEYS"] = keys
    values.setdefault("WAIT", "true")
    return encode_properties(values)


def send_header(
    topic: str, *, queue_id: int = 0, props: str = "", sys_flag: int = 0, batch: bool = False
) -> SendMessageRequestHeader:
    return SendMessageRequestHeader(
        producer_group="test_producer",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=sys_flag,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=props or None,
        batch=batch or None,
    )


async def send(
    client: RemotingClient,
    broker: str,
    topic: str,
    body: bytes,
    *,
    queue_id: int = 0,
    tags: str | None = None,
    keys: str | None = None,
    code: int = RequestCode.SEND_MESSAGE_V2,
    **extra: str,
) -> SendResult:
    header = send_header(topic, queue_id=queue_id, props=properties(tags, keys, **extra))
    return await send_message(client, broker, BROKER_NAME, header, body, msg_id="", code=code)


async def send_batch(
    client: RemotingClient, broker: str, topic: str, bodies: list[bytes], *, queue_id: int = 0
) -> SendResult:
    body = encode_batch_body(BatchColumns.of([(0, b, properties(keys=f"k{i}")) for i, b in enumerate(bodies)]))
    header = send_header(topic, queue_id=queue_id, batch=True)
    return await send_message(
        client, broker, BROKER_NAME, header, body, msg_id="", code=RequestCode.SEND_BATCH_MESSAGE, count=len(bodies)
    )


def pull_header(
    topic: str,
    queue_id: int,
    offset: int,
    *,
    group: str = "test_consumer",
    max_nums: int = 32,
    expression: str = "*",
    suspend_ms: int | None = None,
    commit_offset: int | None = None,
) -> PullMessageRequestHeader:
    """A pull with its subscription; held `suspend_ms` when given, committing `commit_offset` when given."""
    sys_flag = FLAG_SUBSCRIPTION | (FLAG_SUSPEND if suspend_ms is not None else 0)
    sys_flag |= FLAG_COMMIT_OFFSET if commit_offset is not None else 0
    return PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=max_nums,
        sys_flag=sys_flag,
        commit_offset=commit_offset or 0,
        suspend_timeout_millis=suspend_ms or 0,
        sub_version=0,
        subscription=expression,
        expression_type="TAG",
    )


async def pull(
    client: RemotingClient,
    broker: str,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    group: str = "test_consumer",
    max_nums: int = 32,
    expression: str = "*",
    suspend_ms: int | None = None,
    arrow: bool = False,
    timeout_s: float = 10.0,
) -> PullResult:
    header = pull_header(
        topic, queue_id, offset, group=group, max_nums=max_nums, expression=expression, suspend_ms=suspend_ms
    )
    return await pull_message(client, broker, header, arrow=arrow, timeout_s=timeout_s)


async def pull_all(
    client: RemotingClient, broker: str, topic: str, queue_id: int, **options: object
) -> list[MessageExt]:
    messages: list[MessageExt] = []
    offset = 0
    while True:
        result = await pull(client, broker, topic, queue_id, offset, max_nums=1000, **options)  # type: ignore[arg-type]
        if not result.body:
            return messages
        messages.extend(decode_records(result.body))
        offset = result.next_begin_offset
