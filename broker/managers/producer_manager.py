"""Producer groups and their client channels (GET_PRODUCER_CONNECTION_LIST, expiry)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from broker.managers.client_channel import ClientChannelInfo, ClientConnection

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)


class ProducerManager:
    def __init__(self, channel_expired_ms: int, clock: Callable[[], int] = _now_ms) -> None:
        self.channel_expired_ms = channel_expired_ms
        self.clock = clock
        self.groups: dict[str, dict[ClientConnection, ClientChannelInfo]] = {}

    def register(self, group: str, channel: ClientChannelInfo) -> None:
        channels = self.groups.setdefault(group, {})
        if channel.connection not in channels:
            log.info("producer %s joined group %s", channel.client_id, group)
        channels[channel.connection] = channel

    def unregister(self, group: str, connection: ClientConnection) -> None:
        channels = self.groups.get(group)
        if channels is not None and channels.pop(connection, None) is not None and not channels:
            del self.groups[group]

    def connection_closed(self, connection: ClientConnection) -> None:
        for group in list(self.groups):
            self.unregister(group, connection)

    def scan_expired(self) -> None:
        now = self.clock()
        for group, channels in list(self.groups.items()):
            for channel in [c for c in channels.values() if now - c.last_update_ms > self.channel_expired_ms]:
                log.warning("producer %s of group %s expired; removing it", channel.client_id, group)
                self.unregister(group, channel.connection)
                channel.connection.close("producer channel expired")
