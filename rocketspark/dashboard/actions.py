"""What the dashboard's forms change (each a POST with a CSRF token, rocketspark.dashboard.security):
create and delete a topic, reset a group's offsets to a time, send a dead letter back to its topic.

Each returns the sentence the page shows, or raises ActionError with the reason.

- Create: UPDATE_AND_CREATE_TOPIC on every master broker, then until the name servers route it.
- Delete: DELETE_TOPIC_IN_BROKER on its brokers, DELETE_TOPIC_IN_NAMESRV on every name server.
- Reset: INVOKE_BROKER_TO_RESET_OFFSET on each broker of the topic, which has the group's members
  online reset themselves; when none is online (CONSUMER_NOT_ONLINE), or the broker holds no offset
  of the group yet ("consumer group not exist"), the dashboard commits the offsets of the time
  itself with UPDATE_CONSUMER_OFFSET, as Apache's `mqadmin resetOffsetByTime` does. A rocketspark
  Spark source's group only mirrors its query's position: the query goes on
  from its checkpoint, and its next mirror moves the group back to it.
- Resend: the dead letter's body, tags, keys and user properties sent again to the topic it came
  from (its RETRY_TOPIC) with the client's producer, as a new message.
"""

from __future__ import annotations

import asyncio
import time

from rocketspark.client.api.admin import (
    create_topic,
    delete_topic_in_broker,
    delete_topic_in_namesrv,
    get_consume_stats,
    invoke_reset_offset,
)
from rocketspark.client.api.offset import update_consumer_offset
from rocketspark.client.consumer.time_offsets import offset_for_time
from rocketspark.client.producer.producer import AsyncProducer
from rocketspark.client.routes import master_addresses
from rocketspark.dashboard.admin import ClusterAdmin, answered, failures
from rocketspark.dashboard.message_view import READER_GROUP, by_id, resend_target
from rocketspark.errors import RocketMQError, ServerSystemError
from rocketspark.message.message import Message
from rocketspark.message.properties.codec import SYSTEM_KEYS
from rocketspark.message.validation import validate_topic
from rocketspark.protocol.body.topic import TopicConfig

#: how long a create waits for the name servers to route the new topic
ROUTE_WAIT_S = 10.0
MAX_QUEUES = 1024
#: the producer group of resends
RESEND_GROUP = "rocketspark_dashboard_resend"


class ActionError(Exception):
    """A change refused or failed: the page shows the reason."""


async def create(admin: ClusterAdmin, topic: str, queues: int) -> str:
    try:
        validate_topic(topic)
    except ValueError as exc:
        raise ActionError(str(exc)) from None
    if not 1 <= queues <= MAX_QUEUES:
        raise ActionError(f"queues must be from 1 to {MAX_QUEUES}, not {queues}")
    masters = await admin.masters()
    if not masters:
        raise ActionError("no broker is registered with the name servers")
    config = TopicConfig(topic, read_queue_nums=queues, write_queue_nums=queues)
    answers = await admin.each_broker(masters, lambda a: create_topic(admin.remoting, a, config))
    if failed := failures(answers):
        raise ActionError("; ".join(map(str, failed)))
    deadline = time.monotonic() + ROUTE_WAIT_S
    while (route := await admin.route(topic)) is None or set(masters) - {q.broker_name for q in route.queue_datas}:
        if time.monotonic() > deadline:
            raise ActionError(f"topic {topic} was created but the name servers do not route it yet")
        await asyncio.sleep(0.1)
    return f"created topic {topic} with {queues} queues on {', '.join(sorted(masters))}"


async def delete(admin: ClusterAdmin, topic: str) -> str:
    route = await admin.route(topic)
    if route is None:
        raise ActionError(f"topic {topic} does not exist")
    brokers = master_addresses(route)
    answers = await admin.each_broker(brokers, lambda a: delete_topic_in_broker(admin.remoting, a, topic))
    if failed := failures(answers):
        raise ActionError("; ".join(map(str, failed)))
    for address in admin.namesrv:
        try:
            await delete_topic_in_namesrv(admin.remoting, address, topic)
        except RocketMQError as exc:
            raise ActionError(f"name server {address}: {exc}") from None
    return f"deleted topic {topic} from {', '.join(sorted(brokers))}"


async def reset(admin: ClusterAdmin, group: str, topic: str | None, timestamp_ms: int) -> str:
    """Reset `group` on `topic` (None: every topic it has offsets for) to `timestamp_ms`."""
    masters = await admin.masters()
    if topic:
        topics = [topic]
    else:
        stats = answered(await admin.each_broker(masters, lambda a: get_consume_stats(admin.remoting, a, group)))
        topics = sorted({q.topic for s in stats.values() for q in s.offset_table})
    if not topics:
        raise ActionError(f"group {group} has no offsets to reset")
    done = []
    for name in topics:
        route = await admin.route(name)
        if route is None:
            raise ActionError(f"topic {name} does not exist")
        brokers = master_addresses(route)
        queue_counts = {q.broker_name: q.read_queue_nums for q in route.queue_datas}

        async def one(address: str, topic_name: str = name, counts: dict[str, int] = queue_counts) -> int:
            try:
                told = await invoke_reset_offset(admin.remoting, address, topic_name, group, timestamp_ms)
            except ServerSystemError as exc:
                if "not exist" not in str(exc):  # else the group has no offset there yet: commit them
                    raise
                told = None
            if told is not None:
                return len(told.offset_table)
            broker = next(n for n, a in masters.items() if a == address)
            for queue_id in range(counts.get(broker, 0)):
                offset = await offset_for_time(
                    admin.remoting, address, READER_GROUP, topic_name, queue_id, timestamp_ms
                )
                await update_consumer_offset(admin.remoting, address, group, topic_name, queue_id, offset, oneway=False)
            return counts.get(broker, 0)

        answers = await admin.each_broker(brokers, one)
        if failed := failures(answers):
            raise ActionError("; ".join(map(str, failed)))
        done.append(f"{name} ({sum(answered(answers).values())} queues)")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp_ms / 1000))
    return f"reset group {group} to {when} on {', '.join(done)}"


async def resend(admin: ClusterAdmin, producer_options: dict[str, object], msg_id: str) -> str:
    found = (await by_id(admin, msg_id, None)).messages
    message = found[0]
    target = resend_target(message)
    if target is None:
        raise ActionError(f"message {msg_id} is not a dead letter with a topic to go back to")
    properties = {k: v for k, v in message.properties.items() if k not in SYSTEM_KEYS}
    again = Message(target, message.body, tags=message.tags, keys=message.keys, properties=properties)
    producer = AsyncProducer(RESEND_GROUP, namesrv_addr=";".join(admin.namesrv), **producer_options)  # type: ignore[arg-type]
    async with producer:
        result = await producer.send(again)
    return f"sent message {msg_id} back to {target} as {result.msg_id}"
