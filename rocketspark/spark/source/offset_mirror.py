"""The stream's progress mirrored into its consumer group's offsets on the brokers.

Spark's checkpoint holds a query's position; the group's offsets only mirror it, so that RocketMQ's
tools (and `rocketspark group progress`) show the query's lag. A mirror is a write, kept apart from
planning: the stream reader plans a batch by reading (`rocketspark.spark.source.queue_view`), then hands
what has been processed to `OffsetMirror.mirror`. Offsets follow the offset stores' rule
(`rocketspark.client.consumer.offset_store.advances`: next offset to consume, increase only); a queue whose
mirror is `forget`-ten (it started over, or went away) is mirrored from scratch when it is seen
again. A broker that does not take a mirror is not an error: the offsets it missed are handed back
and tried again at the next mirror.

The source never joins its group (as Kafka's source uses `assign()`): it sends no heartbeat for it,
so the brokers list no member for it and a push or pull consumer of the same group is given every
queue in its rebalance, as if the query were not there. While such a member is online, the group's
offsets are that application's progress: the mirror then writes nothing (a WARNING names the
members, once per change of them), so a query never moves another application's offsets, backwards
or forwards; the query's own position is in its checkpoint either way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Iterable, Mapping

from rocketspark.client.api import client_manage
from rocketspark.client.api import offset as offset_api
from rocketspark.client.consumer.offset_store import advances
from rocketspark.client.retry import ask_broker
from rocketspark.errors import ResponseError, RocketMQError
from rocketspark.protocol.codes import ResponseCode
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark import cluster
from rocketspark.spark.options import SourceOptions

log = logging.getLogger(__name__)

#: pause between two attempts of the last mirror of an AvailableNow run
WAIT_STEP_S = 1.0


class OffsetMirror:
    """What the brokers took of one query run's progress, and the writes that bring them on."""

    def __init__(self, options: SourceOptions, group: str) -> None:
        self.options = options
        self.group = group
        self._taken: dict[MessageQueue, int] = {}
        self._members_warned: tuple[str, ...] = ()

    def assume(self, offsets: Mapping[MessageQueue, int]) -> None:
        """The group holds `offsets` already (the query starts from them): nothing to write."""
        self._taken = dict(offsets)

    def forget(self, queues: Iterable[MessageQueue]) -> None:
        """These queues' next mirror is written whatever the brokers took before (a queue that
        started over is mirrored back to where the query reads it from)."""
        for queue in queues:
            self._taken.pop(queue, None)

    def mirror(
        self, offsets: Mapping[MessageQueue, int], *, skip: Collection[str] = (), deadline: float | None = None
    ) -> dict[MessageQueue, int]:
        """Write the offsets that advance the group's; returns those no broker took (brokers in
        `skip`, known not to answer, are not asked). Never raises for a broker's failure."""
        pending = {q: o for q, o in offsets.items() if advances(self._taken.get(q), o)}
        if not pending:
            return {}
        instance = cluster.source_instance(self.options)
        if self._others_online({q.broker_name for q in pending if q.broker_name not in skip}, pending):
            return {}

        async def update(queue: MessageQueue) -> bool:
            if queue.broker_name in skip:
                return False
            offset = pending[queue]
            try:
                await ask_broker(
                    instance,
                    queue,
                    lambda address: offset_api.update_consumer_offset(
                        instance.remoting,
                        address,
                        self.group,
                        queue.topic,
                        queue.queue_id,
                        offset,
                        oneway=False,
                    ),
                    deadline=deadline,
                )
            except RocketMQError as exc:
                log.warning("mirroring offset %d of %s to group %s failed: %s", offset, queue, self.group, exc)
                return False
            return True

        async def every() -> list[bool]:
            return await asyncio.gather(*(update(q) for q in sorted(pending)))

        ordered = sorted(pending)
        taken = {q for q, ok in zip(ordered, cluster.run(every()), strict=True) if ok}
        self._taken.update({q: pending[q] for q in taken})
        return {q: o for q, o in pending.items() if q not in taken}

    def _others_online(self, broker_names: set[str], queues: Iterable[MessageQueue]) -> bool:
        """Whether the brokers list members of the group (none of them is this query), warning
        once per change of them."""
        instance = cluster.source_instance(self.options)
        topic_of = {q.broker_name: q.topic for q in queues}

        async def members(broker_name: str) -> list[str]:
            try:
                address = await instance.broker_address(broker_name, topic_of[broker_name])
                return await client_manage.get_consumer_list(instance.remoting, address, self.group)
            except ResponseError as exc:
                if exc.code == ResponseCode.SYSTEM_ERROR:  # "no consumer for this group"
                    return []
                raise
            except RocketMQError:
                return []  # the mirror to that broker fails too, and is tried again later

        async def every() -> list[list[str]]:
            return await asyncio.gather(*(members(name) for name in sorted(broker_names)))

        online = tuple(sorted({member for found in cluster.run(every()) for member in found}))
        if online and online != self._members_warned:
            log.warning(
                "consumer group %s has other members online (%s): the query leaves the group's offsets to "
                "them and does not mirror its progress there; give the query a consumerGroup of its own to "
                "see its lag in RocketMQ's tools",
                self.group,
                ", ".join(online),
            )
        self._members_warned = online
        return bool(online)

    def mirror_until_taken(self, offsets: Mapping[MessageQueue, int]) -> None:
        """The last mirror of an AvailableNow run (no later batch would try again): tried until the
        brokers take it or pullTimeoutMs passes, then logged as an ERROR."""
        deadline = time.monotonic() + self.options.pull_timeout_ms / 1000
        while left := self.mirror(offsets, deadline=deadline):
            if time.monotonic() >= deadline:
                log.error(
                    "the group %s's offsets of %s could not be updated for %d ms (pullTimeoutMs); RocketMQ's tools "
                    "show more lag there than the query has (its checkpoint holds its position)",
                    self.group,
                    ", ".join(map(str, left)),
                    self.options.pull_timeout_ms,
                )
                return
            time.sleep(WAIT_STEP_S)
