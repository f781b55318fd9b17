"""The RocketMQ side of the Spark tests: a name server and brokers, topics, messages, group offsets."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rocketspark import Message, Producer
from rocketspark.client.api import admin, client_manage, offset
from rocketspark.client.api.kv import get_kv_list
from rocketspark.client.api.route import get_route
from rocketspark.errors import ResponseError
from rocketspark.processes import ServerProcess, wait_registered
from rocketspark.protocol.body.query_mark import NAMESPACE, QueryMark
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.protocol.codes import ResponseCode
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory

#: what a produced message is expected to look like in the source's first columns
Row = tuple[str, str, int, int, str, str, str, bytes]


@dataclass
class SparkCluster:
    namesrv: ServerProcess
    brokers: dict[str, ServerProcess]  # by broker name

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.address

    def create_topic(self, topic: str, queues: int = 4, *, on: tuple[str, ...] = ()) -> None:
        """`queues` queues on each broker (or those named in `on`), routable before this returns;
        on an existing topic this changes its queue count."""
        brokers = [self.brokers[name] for name in on] if on else list(self.brokers.values())

        async def create() -> None:
            client = RemotingClient()
            try:
                for broker in brokers:
                    await admin.create_topic(client, broker.address, TopicConfig(topic, queues, queues))
            finally:
                await client.close()

        asyncio.run(create())
        for broker in brokers:
            wait_registered(self.namesrv.address, broker.address, (topic,))

    def produce(
        self,
        topic: str,
        count: int,
        *,
        tag_cycle: tuple[str, ...] = ("A", "B", "C"),
        first: int = 0,
        on: tuple[str, ...] = (),
        batched: bool = False,
        body_size: int | None = None,
    ) -> list[Row]:
        """`count` messages spread over every queue of the topic (of the brokers named in `on`),
        message i to queue i % queues with tag tag_cycle[i % len(tag_cycle)]; returns their
        expected rows. `batched`: the messages of each queue in one batch send (as few as the size
        limit allows), so they become readable at once, instead of one send per message.
        `body_size`: bodies of that many bytes (the number, zero-padded) instead of
        "<topic> message <i>"."""
        with Producer(f"{topic}_producer", namesrv_addr=self.namesrv_addr) as producer:
            queues = [q for q in producer.fetch_publish_queues(topic) if not on or q.broker_name in on]
            planned = []
            for i in range(first, first + count):
                tag = tag_cycle[i % len(tag_cycle)]
                body = f"{i:0{body_size}d}".encode() if body_size else f"{topic} message {i}".encode()
                message = Message(topic, body, tags=tag, keys=f"key-{i}", properties={"seq": str(i)})
                planned.append((queues[i % len(queues)], message))
            if batched:
                # id(message): (msgId, queueOffset); a batch's answer lists its ids and its first offset
                stored: dict[int, tuple[str, int]] = {}
                for queue in queues:
                    messages = [m for q, m in planned if q == queue]
                    answers = producer.send_batch(messages, queue=queue) if messages else []
                    ids = [(m, r.queue_offset + k) for r in answers for k, m in enumerate(r.msg_id.split(","))]
                    stored.update(zip(map(id, messages), ids, strict=True))
            else:
                stored = {id(m): (r.msg_id, r.queue_offset) for q, m in planned for r in [producer.send(m, queue=q)]}
        return [
            (topic, q.broker_name, q.queue_id, stored[id(m)][1], stored[id(m)][0], m.tags or "", m.keys or "", m.body)
            for q, m in planned
        ]

    def group_offsets(
        self, group: str, topic: str, queues: int = 4, *, on: tuple[str, ...] = ()
    ) -> dict[tuple[str, int], int | None]:
        """The group's committed offsets per (broker, queue) of every broker (or those named in
        `on`); None where the broker has none."""

        async def ask() -> dict[tuple[str, int], int | None]:
            client = RemotingClient()
            found = {}
            try:
                for name, broker in self.brokers.items():
                    if on and name not in on:
                        continue
                    for queue_id in range(queues):
                        found[(name, queue_id)] = await offset.query_consumer_offset(
                            client, broker.address, group, topic, queue_id, set_zero_if_not_found=False
                        )
            finally:
                await client.close()
            return found

        return asyncio.run(ask())

    def group_view(self, group: str, topic: str) -> tuple[list[list[str]], int]:
        """What RocketMQ's admin tools see of a group: its consumer ids per broker and its total lag."""

        async def ask() -> tuple[list[list[str]], int]:
            client = RemotingClient()
            try:
                ids = [await members(client, b.address, group) for b in self.brokers.values()]
                stats = [await admin.get_consume_stats(client, b.address, group, topic) for b in self.brokers.values()]
            finally:
                await client.close()
            return ids, sum(s.lag for s in stats)

        return asyncio.run(ask())

    def query_marks(self) -> dict[str, QueryMark]:
        """The Spark queries' marks in the name server's KV config (GET_KVLIST_BY_NAMESPACE), by group."""

        async def ask() -> dict[str, str]:
            client = RemotingClient()
            try:
                return await get_kv_list(client, self.namesrv_addr, NAMESPACE)
            finally:
                await client.close()

        return {group: QueryMark.from_json(value.encode()) for group, value in asyncio.run(ask()).items()}

    def runtime_counters(self) -> dict[str, int]:
        """The brokers' message and request counters (standard and Arrow pulls and sends), summed."""

        async def ask() -> dict[str, int]:
            client = RemotingClient()
            totals: dict[str, int] = {}
            try:
                for broker in self.brokers.values():
                    for key, value in (await admin.get_runtime_info(client, broker.address)).items():
                        if key.endswith(("PullMessages", "SendMessages", "PullRequests", "SendRequests")):
                            totals[key] = totals.get(key, 0) + int(value)
            finally:
                await client.close()
            return totals

        return asyncio.run(ask())


def two_brokers_on(factory: ServerFactory, *extra: str) -> SparkCluster:
    """A name server with broker-a and broker-b; `extra`: flags both brokers start with."""
    namesrv = factory.namesrv()
    return SparkCluster(namesrv, factory.brokers(namesrv.address, ("broker-a", "broker-b"), *extra))


class Brokers:
    """A name server with broker-a and broker-b; broker-b can crash and come back with its data."""

    def __init__(self, servers: ServerFactory, data_dir: Path, *extra: str) -> None:
        """`extra`: flags both brokers start with (each time), such as `--set key=value`."""
        self.servers = servers
        self.b_dir = data_dir / "broker-b-data"
        self.extra = extra
        namesrv = servers.namesrv()
        self.cluster = SparkCluster(
            namesrv,
            servers.brokers(namesrv.address, ("broker-a", "broker-b"), *extra, data_dirs={"broker-b": self.b_dir}),
        )

    def restart_b(self) -> ServerProcess:
        """broker-b again, on a new port, with the messages it had."""
        broker = self.servers.broker(
            self.cluster.namesrv_addr, *self.extra, broker_name="broker-b", data_dir=self.b_dir
        )
        self.cluster.brokers["broker-b"] = broker
        return broker

    @contextlib.contextmanager
    def b_frozen(self) -> Iterator[None]:
        """broker-b stopped dead (SIGSTOP): its connections stay open, so the name server keeps routing
        to it until it expires, and requests to it time out."""
        pid = self.cluster.brokers["broker-b"].pid
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    def queue_count(self, topic: str, broker_name: str) -> int:
        async def ask() -> int:
            client = RemotingClient()
            try:
                route = await get_route(client, self.cluster.namesrv_addr, topic)
            finally:
                await client.close()
            return next((q.read_queue_nums for q in route.queue_datas if q.broker_name == broker_name), 0)

        return asyncio.run(ask())


def ends_of(rows: list[Row]) -> dict[tuple[str, int], int]:
    """The next offset after the last of `rows` in each (broker, queue)."""
    ends: dict[tuple[str, int], int] = {}
    for row in rows:
        ends[(row[1], row[2])] = max(ends.get((row[1], row[2]), 0), row[3] + 1)
    return ends


async def members(client: RemotingClient, address: str, group: str) -> list[str]:
    """The group's online clients on a broker; none where it answers "no consumer for this group"."""
    try:
        return await client_manage.get_consumer_list(client, address, group)
    except ResponseError as exc:
        if exc.code != ResponseCode.SYSTEM_ERROR:
            raise
        return []
