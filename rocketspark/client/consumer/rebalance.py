"""Rebalancing: which of a topic's queues this member of a consumer group should read now."""

from __future__ import annotations

import logging

from rocketspark.client.api import client_manage
from rocketspark.client.consumer.allocation import AllocateStrategy
from rocketspark.client.instance import ClientInstance
from rocketspark.client.routes import master_addresses, subscribe_queues
from rocketspark.errors import RocketMQError
from rocketspark.protocol.body.heartbeat import MessageModel
from rocketspark.protocol.queue import MessageQueue

log = logging.getLogger(__name__)


class Rebalancer:
    def __init__(
        self, instance: ClientInstance, group: str, strategy: AllocateStrategy, message_model: MessageModel
    ) -> None:
        self.instance = instance
        self.group = group
        self.strategy = strategy
        self.message_model = message_model

    async def consumer_ids(self, topic: str) -> list[str]:
        """The group's members as the first broker of the topic knows them (Java asks one broker)."""
        route = await self.instance.route(topic)
        for name, address in sorted(master_addresses(route).items()):
            try:
                return await client_manage.get_consumer_list(self.instance.remoting, address, self.group)
            except RocketMQError as exc:
                log.debug("broker %s could not list group %s: %s", name, self.group, exc)
        return []

    async def assignment(self, topic: str) -> list[MessageQueue] | None:
        """Queues of `topic` for this member; None when the group's members are not known yet."""
        route = await self.instance.route(topic, refresh=True)
        queues = subscribe_queues(topic, route)
        if self.message_model is MessageModel.BROADCASTING or not queues:
            return queues
        ids = await self.consumer_ids(topic)
        if self.instance.client_id not in ids:
            log.info(
                "group %s does not list this client (%s) yet; rebalancing later", self.group, self.instance.client_id
            )
            return None
        return self.strategy(self.instance.client_id, queues, ids)
