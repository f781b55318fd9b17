"""Broker locks of orderly clustering consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ), per broker."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable

from rocketspark.client.api import client_manage
from rocketspark.client.instance import ClientInstance
from rocketspark.errors import RocketMQError
from rocketspark.protocol.queue import MessageQueue

log = logging.getLogger(__name__)


def _by_broker(queues: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
    grouped: dict[str, list[MessageQueue]] = defaultdict(list)
    for queue in sorted(queues):
        grouped[queue.broker_name].append(queue)
    return grouped


class QueueLocks:
    def __init__(self, instance: ClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group

    async def lock(self, queues: Iterable[MessageQueue]) -> set[MessageQueue]:
        """Lock `queues` on their brokers; the ones this client holds now (a failing broker: none of its)."""
        held: set[MessageQueue] = set()
        for broker_name, batch in _by_broker(queues).items():
            try:
                address = await self.instance.broker_address(broker_name, batch[0].topic)
                locked = await client_manage.lock_batch(
                    self.instance.remoting, address, self.group, self.instance.client_id, batch
                )
            except RocketMQError as exc:
                log.warning(
                    "locking %d queue(s) of group %s on broker %s failed: %s", len(batch), self.group, broker_name, exc
                )
                continue
            held.update(locked)
        return held

    async def unlock(self, queues: Iterable[MessageQueue]) -> None:
        for broker_name, batch in _by_broker(queues).items():
            try:
                address = await self.instance.broker_address(broker_name, batch[0].topic)
                await client_manage.unlock_batch(
                    self.instance.remoting, address, self.group, self.instance.client_id, batch, timeout_s=1
                )
            except RocketMQError as exc:
                log.warning(
                    "unlocking %d queue(s) of group %s on broker %s failed: %s",
                    len(batch),
                    self.group,
                    broker_name,
                    exc,
                )
