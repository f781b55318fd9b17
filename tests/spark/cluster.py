"""The RocketMQ side of the Spark tests: a name server and brokers, topics, messages, group offsets."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from rocketspark import Message, Producer
from rocketspark.client.api import admin, client_manage, offset
from rocketspark.processes import ServerProcess, wait_registered
from rocketspark.remoting.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient

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
        self, topic: str, count: int, *, tag_cycle: tuple[str, ...] = ("A", "B", "C"), first: int = 0
    ) -> list[Row]:
        """`count` messages spread over every queue of the topic; returns their expected rows."""
        rows = []
        with Producer(f"{topic}_producer", namesrv_addr=self.namesrv_addr) as producer:
            queues = producer.fetch_publish_queues(topic)
            for i in range(first, first + count):
                queue = queues[i % len(queues)]
                tag = tag_cycle[i % len(tag_cycle)]
                body = f"{topic} message {i}".encode()
                message = Message(topic, body, tags=tag, keys=f"key-{i}", properties={"seq": str(i)})
                result = producer.send(message, queue=queue)
                rows.append(
                    (
                        topic,
                        queue.broker_name,
                        queue.queue_id,
                        result.queue_offset,
                        result.msg_id,
                        tag,
                        f"key-{i}",
                        body,
                    )
                )
        return rows

    def group_offsets(self, group: str, topic: str, queues: int = 4) -> dict[tuple[str, int], int | None]:
        """The group's committed offsets per (broker, queue); None where the broker has none."""

        async def ask() -> dict[tuple[str, int], int | None]:
            client = RemotingClient()
            found = {}
            try:
                for name, broker in self.brokers.items():
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
                ids = [await client_manage.get_consumer_list(client, b.address, group) for b in self.brokers.values()]
                stats = [await admin.get_consume_stats(client, b.address, group, topic) for b in self.brokers.values()]
            finally:
                await client.close()
            return ids, sum(s.lag for s in stats)

        return asyncio.run(ask())

    def runtime_counters(self) -> dict[str, int]:
        """The brokers' message counters (standard and Arrow pulls and sends), summed."""

        async def ask() -> dict[str, int]:
            client = RemotingClient()
            totals: dict[str, int] = {}
            try:
                for broker in self.brokers.values():
                    for key, value in (await admin.get_runtime_info(client, broker.address)).items():
                        if key.endswith(("PullMessages", "SendMessages")):
                            totals[key] = totals.get(key, 0) + int(value)
            finally:
                await client.close()
            return totals

        return asyncio.run(ask())
