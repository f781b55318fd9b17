"""Consumer groups: members (client channels), subscriptions from heartbeats, channel expiry.

When a group's membership changes, `on_ids_changed` is told, and the broker sends
NOTIFY_CONSUMER_IDS_CHANGED to every member so they rebalance at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.managers.client_channel import ClientChannelInfo, ClientConnection
from rocketspark.protocol.body.heartbeat import ConsumeFromWhere, ConsumeType, MessageModel, SubscriptionData

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class ConsumerGroupInfo:
    group_name: str
    consume_type: ConsumeType
    message_model: MessageModel
    consume_from_where: ConsumeFromWhere
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    channels: dict[ClientConnection, ClientChannelInfo] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return sorted({c.client_id for c in self.channels.values()})


class ConsumerManager:
    def __init__(
        self,
        channel_expired_ms: int,
        on_ids_changed: Callable[[ConsumerGroupInfo], None],
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        self.channel_expired_ms = channel_expired_ms
        self.on_ids_changed = on_ids_changed
        self.clock = clock
        self.groups: dict[str, ConsumerGroupInfo] = {}

    def register(
        self,
        group: str,
        channel: ClientChannelInfo,
        *,
        consume_type: ConsumeType,
        message_model: MessageModel,
        consume_from_where: ConsumeFromWhere,
        subscriptions: list[SubscriptionData],
        notify: bool,
    ) -> None:
        info = self.groups.get(group)
        if info is None:
            info = ConsumerGroupInfo(group, consume_type, message_model, consume_from_where)
            self.groups[group] = info
        info.consume_type, info.message_model, info.consume_from_where = consume_type, message_model, consume_from_where
        new_member = channel.connection not in info.channels
        if new_member:
            log.info("consumer %s joined group %s", channel.client_id, group)
        info.channels[channel.connection] = channel
        info.subscriptions = {subscription.topic: subscription for subscription in subscriptions}
        if new_member and notify:
            self.on_ids_changed(info)

    def unregister(self, group: str, connection: ClientConnection, notify: bool = True) -> None:
        info = self.groups.get(group)
        if info is None or info.channels.pop(connection, None) is None:
            return
        log.info("consumer left group %s", group)
        self._after_removal(info, notify)

    def _after_removal(self, info: ConsumerGroupInfo, notify: bool) -> None:
        if not info.channels:
            del self.groups[info.group_name]
        elif notify:
            self.on_ids_changed(info)

    def connection_closed(self, connection: ClientConnection) -> None:
        for info in list(self.groups.values()):
            if info.channels.pop(connection, None) is not None:
                log.info("connection of a consumer of group %s closed", info.group_name)
                self._after_removal(info, notify=True)

    def scan_expired(self) -> None:
        now = self.clock()
        for info in list(self.groups.values()):
            expired = [c for c in info.channels.values() if now - c.last_update_ms > self.channel_expired_ms]
            for channel in expired:
                log.warning(
                    "consumer %s of group %s sent no heartbeat for %d ms; removing it",
                    channel.client_id,
                    info.group_name,
                    now - channel.last_update_ms,
                )
                del info.channels[channel.connection]
                channel.connection.close("consumer channel expired")
            if expired:
                self._after_removal(info, notify=True)

    def subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.groups.get(group)
        return info.subscriptions.get(topic) if info else None
