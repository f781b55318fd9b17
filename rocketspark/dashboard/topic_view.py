"""What the topic pages show: `/topics` (name, queues, messages stored, messages in per second,
the groups with offsets on it) and `/topics/<topic>` (its queues with their offsets and store
times, the groups reading it with their lag).

Requests: GET_ALL_TOPIC_LIST_FROM_NAMESERVER, and per broker GET_ALL_TOPIC_CONFIG (queue counts),
GET_ALL_CONSUMER_OFFSET (which groups read which topic), GET_TOPIC_STATS_INFO (offsets and last
store times), VIEW_BROKER_STATS_DATA TOPIC_PUT_NUMS (messages in per second over the last minute),
GET_EARLIEST_MSG_STORETIME and GET_CONSUME_STATS.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from rocketspark.client.api.admin import (
    get_all_consumer_offsets,
    get_all_topic_config,
    get_consume_stats,
    get_topic_stats,
    view_broker_stats,
)
from rocketspark.client.api.offset import earliest_store_time
from rocketspark.client.api.route import get_all_topics
from rocketspark.client.routes import master_addresses
from rocketspark.dashboard.admin import BrokerFailure, ClusterAdmin, answered, failures
from rocketspark.errors import RocketMQError
from rocketspark.message.validation import is_system_topic
from rocketspark.protocol.body.stats import TopicStatsTable
from rocketspark.protocol.body.topic import Perm

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"


@dataclass(slots=True)
class TopicRow:
    name: str
    queues: int = 0
    stored: int = 0
    in_tps: float | None = None  # None: no broker measures it
    groups: list[str] = field(default_factory=list)


@dataclass(slots=True)
class TopicList:
    topics: list[TopicRow]
    failures: list[BrokerFailure]


@dataclass(frozen=True, slots=True)
class QueueRow:
    broker: str
    queue_id: int
    min_offset: int
    max_offset: int
    first_stored_ms: int
    last_stored_ms: int

    @property
    def messages(self) -> int:
        return self.max_offset - self.min_offset


@dataclass(frozen=True, slots=True)
class ReaderRow:
    group: str
    committed: int
    max_offset: int
    lag: int


@dataclass(slots=True)
class TopicDetail:
    name: str
    queues: list[QueueRow]
    readers: list[ReaderRow]
    failures: list[BrokerFailure]
    perm: str = ""

    @property
    def stored(self) -> int:
        return sum(q.messages for q in self.queues)


async def in_rate(admin: ClusterAdmin, address: str, topic: str) -> float | None:
    """Messages in per second over the last minute as the broker measured them; 0 for a topic
    nothing was stored in (the broker has no item), None for a broker without the request."""
    try:
        return (await view_broker_stats(admin.remoting, address, TOPIC_PUT_NUMS, topic)).stats_minute.tps
    except RocketMQError as exc:
        return 0.0 if "not exist" in str(exc) else None


def readers_by_topic(offsets: dict[str, dict[tuple[str, str], dict[int, int]]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for table in offsets.values():
        for topic, group in table:
            out.setdefault(topic, set()).add(group)
    return out


async def topic_list(admin: ClusterAdmin, *, include_system: bool = False) -> TopicList:
    masters = await admin.masters()
    names = set(await admin.on_namesrv(get_all_topics))
    configs = await admin.each_broker(masters, lambda a: get_all_topic_config(admin.remoting, a))
    offsets = await admin.each_broker(masters, lambda a: get_all_consumer_offsets(admin.remoting, a))
    queue_counts: dict[str, int] = {}
    served_by: dict[str, list[str]] = {}
    for broker, wrapper in answered(configs).items():
        for name, config in wrapper.topic_config_table.items():
            names.add(name)
            queue_counts[name] = queue_counts.get(name, 0) + config.read_queue_nums
            served_by.setdefault(name, []).append(broker)
    hidden = set(masters) | {b.cluster for b in admin.known.values()}
    shown = sorted(n for n in names if include_system or not (is_system_topic(n) or n in hidden))
    readers = readers_by_topic(answered(offsets))

    async def row(name: str) -> TopicRow:
        brokers = {b: masters[b] for b in served_by.get(name, []) if b in masters}
        stats = answered(await admin.each_broker(brokers, lambda a: get_topic_stats(admin.remoting, a, name)))
        rates = [r for r in await asyncio.gather(*(in_rate(admin, a, name) for a in brokers.values())) if r is not None]
        stored = sum(o.max_offset - o.min_offset for table in stats.values() for o in table.offset_table.values())
        return TopicRow(
            name, queue_counts.get(name, 0), stored, sum(rates) if rates else None, sorted(readers.get(name, ()))
        )

    rows = await asyncio.gather(*(row(name) for name in shown))
    return TopicList(list(rows), failures(configs) + failures(offsets))


async def topic_detail(admin: ClusterAdmin, topic: str) -> TopicDetail | None:
    """None when no broker serves the topic."""
    route = await admin.route(topic)
    if route is None:
        return None
    brokers = master_addresses(route)
    stats = await admin.each_broker(brokers, lambda a: get_topic_stats(admin.remoting, a, topic))
    queues: list[QueueRow] = []

    async def broker_queues(broker: str, table: TopicStatsTable) -> list[QueueRow]:
        address = brokers[broker]
        ordered = sorted(table.offset_table.items())

        async def first_time(queue_id: int, has_messages: bool) -> int:
            if not has_messages:
                return 0
            try:
                return await admin.limited(earliest_store_time(admin.remoting, address, topic, queue_id))
            except RocketMQError:
                return 0

        firsts = await asyncio.gather(*(first_time(q.queue_id, o.max_offset > o.min_offset) for q, o in ordered))
        return [
            QueueRow(broker, q.queue_id, o.min_offset, o.max_offset, first, o.last_update_timestamp)
            for (q, o), first in zip(ordered, firsts, strict=True)
        ]

    for found in await asyncio.gather(*(broker_queues(b, t) for b, t in answered(stats).items())):
        queues.extend(found)
    offsets = await admin.each_broker(brokers, lambda a: get_all_consumer_offsets(admin.remoting, a))
    groups = sorted(readers_by_topic(answered(offsets)).get(topic, ()))

    async def reader(group: str) -> ReaderRow:
        answers = answered(
            await admin.each_broker(brokers, lambda a: get_consume_stats(admin.remoting, a, group, topic))
        )
        wrappers = [w for s in answers.values() for w in s.offset_table.values()]
        return ReaderRow(
            group,
            sum(w.consumer_offset for w in wrappers),
            sum(w.broker_offset for w in wrappers),
            sum(max(0, w.broker_offset - w.consumer_offset) for w in wrappers),
        )

    readers = await asyncio.gather(*(reader(group) for group in groups))
    perm = route.queue_datas[0].perm if route.queue_datas else 0
    return TopicDetail(
        topic,
        sorted(queues, key=lambda q: (q.broker, q.queue_id)),
        list(readers),
        failures(stats) + failures(offsets),
        perm=("R" if perm & Perm.READ else "-") + ("W" if perm & Perm.WRITE else "-"),
    )
