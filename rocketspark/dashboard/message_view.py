"""What the messages page (`/messages`) finds, and how a body is shown.

- `?topic=T&key=K`: QUERY_MESSAGE by key on every broker of the topic;
- `?topic=T&start=..&end=..`: per queue, the first offsets stored at or after both times
  (rocketspark.client.consumer.time_offsets: exact on Apache's nearest-entry search too), and the
  messages between them read with PULL_MESSAGE (nothing committed), the first `limit` by store time;
- `?msgId=ID`: VIEW_MESSAGE_BY_ID for an offset msgId, asked only of the broker it names when that is
  one the name servers list (an id never makes the dashboard connect elsewhere); else, with a topic,
  QUERY_MESSAGE by the producer's id (UNIQ_KEY).

Bodies are shown as text, as pretty-printed JSON, or as hex, at most `BODY_SHOWN` bytes of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable
from dataclasses import dataclass

from rocketspark.client.api.pull import PullStatus, read_pull
from rocketspark.client.consumer.time_offsets import offset_for_time
from rocketspark.client.lookup import by_key_on_broker, by_offset_msg_id, store_order
from rocketspark.client.routes import master_addresses
from rocketspark.dashboard.admin import BrokerFailure, ClusterAdmin, answered, failures
from rocketspark.message.message import MessageExt
from rocketspark.message.properties.codec import RETRY_TOPIC
from rocketspark.message.records.decoding import decode_records

#: the consumer group the dashboard's pulls name (they commit nothing and are never held)
READER_GROUP = "rocketspark_dashboard"
#: the most messages one search shows
MAX_MESSAGES = 64
#: the most bytes of a body a page shows
BODY_SHOWN = 64 * 1024
DLQ_PREFIX = "%DLQ%"


class NotFoundError(Exception):
    """What was asked for does not exist (an unknown topic, no such message): a 404 page."""


@dataclass(slots=True)
class Found:
    messages: list[MessageExt]
    failures: list[BrokerFailure]
    more: bool = False  # more messages matched than shown


def is_dead_letter(message: MessageExt) -> bool:
    return message.topic.startswith(DLQ_PREFIX)


def resend_target(message: MessageExt) -> str | None:
    """The topic a dead letter came from (RETRY_TOPIC), where it can be sent back."""
    return message.properties.get(RETRY_TOPIC) if is_dead_letter(message) else None


def body_views(body: bytes) -> dict[str, str]:
    """The ways the body can be shown: `text` (when it is UTF-8), `json` (when it parses), `hex`."""
    shown = body[:BODY_SHOWN]
    views = {"hex": " ".join(f"{b:02x}" for b in shown)}
    try:
        text = shown.decode()
    except UnicodeDecodeError:
        return views
    views["text"] = text
    with contextlib.suppress(ValueError, RecursionError):  # not JSON (UnicodeDecodeError is a ValueError)
        views["json"] = json.dumps(json.loads(body.decode()), indent=2, ensure_ascii=False)[:BODY_SHOWN]
    return views


def default_view(views: dict[str, str]) -> str:
    return "json" if "json" in views else "text" if "text" in views else "hex"


async def _brokers_of(admin: ClusterAdmin, topic: str) -> dict[str, str]:
    route = await admin.route(topic)
    if route is None:
        raise NotFoundError(f"topic {topic} does not exist (no broker serves it)")
    return master_addresses(route)


async def by_key(admin: ClusterAdmin, topic: str, key: str, *, unique: bool = False) -> Found:
    brokers = await _brokers_of(admin, topic)
    names = {address: name for name, address in brokers.items()}

    def ask(address: str) -> Awaitable[list[MessageExt]]:
        return by_key_on_broker(
            admin.remoting, names[address], address, topic, key, max_num=MAX_MESSAGES, unique=unique
        )

    answers = await admin.each_broker(brokers, ask)
    found = sorted((m for ms in answered(answers).values() for m in ms), key=store_order)
    return Found(found[:MAX_MESSAGES], failures(answers), len(found) > MAX_MESSAGES)


async def by_time(admin: ClusterAdmin, topic: str, start_ms: int, end_ms: int, limit: int = MAX_MESSAGES) -> Found:
    """The messages stored in [start_ms, end_ms), the first `limit` by store time."""
    brokers = await _brokers_of(admin, topic)
    route = await admin.route(topic)
    queue_counts = {q.broker_name: q.read_queue_nums for q in (route.queue_datas if route else [])}
    remoting = admin.remoting

    async def queue(name: str, address: str, queue_id: int) -> tuple[list[MessageExt], bool]:
        first, end = await asyncio.gather(
            offset_for_time(remoting, address, READER_GROUP, topic, queue_id, start_ms),
            offset_for_time(remoting, address, READER_GROUP, topic, queue_id, end_ms),
        )
        messages: list[MessageExt] = []
        offset = first
        while offset < end and len(messages) < limit:
            count = min(32, end - offset, limit - len(messages))
            result = await admin.limited(read_pull(remoting, address, READER_GROUP, topic, queue_id, offset, count))
            if result.status is not PullStatus.FOUND:
                break
            pulled = [m for m in decode_records(result.body, broker_name=name) if m.queue_offset < end]
            messages.extend(pulled)
            if not pulled or result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset
        return messages[:limit], end - first > limit

    async def broker(address: str) -> tuple[list[MessageExt], bool]:
        name = next(n for n, a in brokers.items() if a == address)
        parts = await asyncio.gather(*(queue(name, address, q) for q in range(queue_counts.get(name, 0))))
        return [m for ms, _ in parts for m in ms], any(more for _, more in parts)

    answers = await admin.each_broker(brokers, broker)
    got = answered(answers)
    found = sorted((m for ms, _ in got.values() for m in ms), key=store_order)
    more = len(found) > limit or any(more for _, more in got.values())
    return Found(found[:limit], failures(answers), more)


async def by_id(admin: ClusterAdmin, msg_id: str, topic: str | None) -> Found:
    """A message by its offset msgId, else (with a topic) by the producer's msgId."""
    found = await admin.limited(by_offset_msg_id(admin.remoting, await admin.masters(), msg_id))
    if found:
        return Found(found, [])
    if topic:
        found_by_key = await by_key(admin, topic, msg_id.strip(), unique=True)
        if found_by_key.messages:
            return found_by_key
    hint = "" if topic else " (for a producer's msgId, give its topic too)"
    raise NotFoundError(f"no message with id {msg_id}{hint}")
