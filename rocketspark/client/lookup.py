"""Finding stored messages, decoded: by key or by the producer's msgId on one broker (QUERY_MESSAGE),
and by offset msgId (VIEW_MESSAGE_BY_ID, asked only of the broker the id names when it is one of the
brokers given: an id never makes the caller connect elsewhere).

`rocketspark message show` and the dashboard's messages page both find messages with these.
"""

from __future__ import annotations

from collections.abc import Mapping

from rocketspark.client.api.admin import query_message, view_message
from rocketspark.errors import QueryNotFoundError, ResponseError
from rocketspark.message.ids import decode_offset_msg_id
from rocketspark.message.message import MessageExt
from rocketspark.message.records.decoding import decode_records
from rocketspark.remoting.client import RemotingClient


async def by_key_on_broker(
    client: RemotingClient,
    broker_name: str,
    broker_addr: str,
    topic: str,
    key: str,
    *,
    max_num: int,
    unique: bool = False,
    timeout_s: float | None = None,
) -> list[MessageExt]:
    """The messages of `topic` on one broker whose keys include `key` (with `unique`: whose
    UNIQ_KEY, the producer's msgId, is `key`); [] when the broker holds none."""
    try:
        body = await query_message(
            client, broker_addr, topic, key, max_num=max_num, unique_key=unique, timeout_s=timeout_s
        )
    except QueryNotFoundError:
        return []
    return decode_records(body, broker_name=broker_name)


async def by_offset_msg_id(
    client: RemotingClient, masters: Mapping[str, str], msg_id: str, timeout_s: float | None = None
) -> list[MessageExt]:
    """The message of an offset msgId, from the broker it names if that is one of `masters` (broker
    name -> address); [] when the id is no offset msgId, names no broker of them, or its broker
    holds no message there."""
    try:
        address, offset = decode_offset_msg_id(msg_id.strip().upper())
    except ValueError:
        return []
    names = {address_: name for name, address_ in masters.items()}
    if address not in names:
        return []
    try:
        body = await view_message(client, address, offset, timeout_s)
    except ResponseError:
        return []
    return decode_records(body, broker_name=names[address])


def store_order(message: MessageExt) -> tuple[int, str, int, int]:
    """How found messages are listed: by store time, then by queue and offset."""
    return message.store_timestamp, message.broker_name, message.queue_id, message.queue_offset
