"""What the group pages show: `/groups` (every group with members online or committed offsets:
its clients, topics, lag, Spark query) and `/groups/<group>` (its members, per queue the committed
offset, max offset and lag).

Requests, per broker: GET_ALL_SUBSCRIPTIONGROUP_CONFIG and GET_ALL_CONSUMER_OFFSET (which groups
exist), GET_CONSUMER_CONNECTION_LIST (members online: 4.x clients, and 5.x clients once the broker's
gRPC endpoint registers them with its consumer manager), GET_CONSUME_STATS (offsets and lag); and
from the name servers, GET_KVLIST_BY_NAMESPACE: the marks rocketspark's Spark source leaves for its
groups (rocketspark.protocol.body.query_mark), since the source itself is never a member.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from rocketspark.client.api.admin import (
    get_all_consumer_offsets,
    get_consume_stats,
    get_consumer_connections,
    get_subscription_groups,
)
from rocketspark.client.api.kv import get_kv_list
from rocketspark.dashboard.admin import BrokerFailure, ClusterAdmin, answered, failures
from rocketspark.errors import RocketMQError
from rocketspark.protocol.body.consumer import ClientConnection, ConsumerConnection
from rocketspark.protocol.body.query_mark import NAMESPACE, QueryMark
from rocketspark.protocol.body.stats import ConsumeStats, OffsetWrapper
from rocketspark.protocol.queue import MessageQueue


@dataclass(frozen=True, slots=True)
class QueueLag:
    queue: MessageQueue
    committed: int
    max_offset: int
    last_consumed_ms: int

    @property
    def lag(self) -> int:
        return max(0, self.max_offset - self.committed)


@dataclass(slots=True)
class GroupRow:
    name: str
    clients: int
    topics: list[str]
    lag: int
    query: QueryMark | None = None


@dataclass(slots=True)
class GroupList:
    groups: list[GroupRow]
    failures: list[BrokerFailure]


@dataclass(slots=True)
class GroupDetail:
    name: str
    members: list[ClientConnection]
    subscriptions: list[str]
    queues: list[QueueLag]
    failures: list[BrokerFailure]
    query: QueryMark | None = None
    message_model: str = ""
    consume_type: str = ""
    topics: list[str] = field(default_factory=list)

    @property
    def lag(self) -> int:
        return sum(q.lag for q in self.queues)

    def lag_by_topic(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for queue in self.queues:
            out[queue.queue.topic] = out.get(queue.queue.topic, 0) + queue.lag
        return out


#: groups the brokers create for themselves or for tools, never an application's
TOOL_GROUPS = frozenset(
    {
        "TOOLS_CONSUMER",
        "FILTERSRV_CONSUMER",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_OWNER",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_PULL",
        "CID_RMQ_SYS_TRANS",
        "__MONITOR_CONSUMER",
    }
)


async def query_marks(admin: ClusterAdmin) -> dict[str, QueryMark]:
    """Group -> the Spark query that reads as it (none when the name servers keep no marks)."""
    try:
        table = await admin.on_namesrv(lambda client, address: get_kv_list(client, address, NAMESPACE))
    except RocketMQError:
        return {}
    marks = {}
    for group, value in table.items():
        try:
            marks[group] = QueryMark.from_json(value.encode())
        except (ValueError, TypeError):
            continue  # not a mark this version can read
    return marks


def _queue_lags(stats: list[ConsumeStats]) -> list[QueueLag]:
    wrappers: dict[MessageQueue, OffsetWrapper] = {q: w for s in stats for q, w in s.offset_table.items()}
    return [QueueLag(q, w.consumer_offset, w.broker_offset, w.last_timestamp) for q, w in sorted(wrappers.items())]


async def group_stats(
    admin: ClusterAdmin, masters: dict[str, str], group: str
) -> tuple[list[ConsumeStats], list[BrokerFailure]]:
    """Every queue of every topic the group committed an offset on (on any broker): asked per topic
    of every broker, so a broker where the group never committed shows its queues' whole lag."""
    first = await admin.each_broker(masters, lambda a: get_consume_stats(admin.remoting, a, group))
    topics = sorted({q.topic for s in answered(first).values() for q in s.offset_table})

    async def of_topic(topic: str) -> list[ConsumeStats]:
        answers = await admin.each_broker(masters, lambda a: get_consume_stats(admin.remoting, a, group, topic))
        return list(answered(answers).values())

    stats = [s for found in await asyncio.gather(*(of_topic(t) for t in topics)) for s in found]
    return stats, failures(first)


async def members(
    admin: ClusterAdmin, masters: dict[str, str], group: str
) -> dict[str, ConsumerConnection | BrokerFailure | None]:
    return await admin.each_broker(masters, lambda a: get_consumer_connections(admin.remoting, a, group))


def _clients(connections: dict[str, ConsumerConnection | BrokerFailure | None]) -> dict[str, ClientConnection]:
    found: dict[str, ClientConnection] = {}
    for answer in connections.values():
        if isinstance(answer, ConsumerConnection):
            for connection in answer.connection_set:
                found.setdefault(connection.client_id, connection)
    return found


async def group_list(admin: ClusterAdmin) -> GroupList:
    masters = await admin.masters()
    offsets = await admin.each_broker(masters, lambda a: get_all_consumer_offsets(admin.remoting, a))
    named = await admin.each_broker(masters, lambda a: get_subscription_groups(admin.remoting, a))
    marks = await query_marks(admin)
    committed = {group for table in answered(offsets).values() for _, group in table}
    candidates = sorted((committed | {g for names in answered(named).values() for g in names}) - TOOL_GROUPS)

    async def row(group: str) -> GroupRow | None:
        clients = _clients(await members(admin, masters, group))
        if not clients and group not in committed:
            return None
        lags = _queue_lags((await group_stats(admin, masters, group))[0])
        topics = sorted({q.queue.topic for q in lags})
        return GroupRow(group, len(clients), topics, sum(q.lag for q in lags), marks.get(group))

    rows = [r for r in await asyncio.gather(*(row(group) for group in candidates)) if r is not None]
    return GroupList(rows, failures(offsets) + failures(named))


async def group_detail(admin: ClusterAdmin, group: str) -> GroupDetail | None:
    """None when no broker knows the group (no member, no offset, no subscription group)."""
    masters = await admin.masters()
    connections = await members(admin, masters, group)
    stats, stats_failures = await group_stats(admin, masters, group)
    named = await admin.each_broker(masters, lambda a: get_subscription_groups(admin.remoting, a))
    clients = _clients(connections)
    lags = _queue_lags(stats)
    known = any(group in names for names in answered(named).values())
    if not clients and not lags and not known:
        return None
    online = [c for c in connections.values() if isinstance(c, ConsumerConnection)]
    subscriptions = sorted({topic for c in online for topic in c.subscription_table})
    marks = await query_marks(admin)
    first = online[0] if online else None
    return GroupDetail(
        group,
        sorted(clients.values(), key=lambda c: c.client_id),
        subscriptions,
        lags,
        failures(connections) + stats_failures,
        marks.get(group),
        message_model=first.message_model.name if first and first.message_model else "",
        consume_type=first.consume_type.name if first and first.consume_type else "",
        topics=sorted({q.queue.topic for q in lags} | set(subscriptions)),
    )
