"""Route tables of the name server, shaped like Apache RocketMQ's `RouteInfoManager`.

All state lives on the event loop and every method runs to completion without awaiting, so no
lock is needed (Java guards six maps with one read-write lock).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rocketspark.protocol.body.route import MASTER_ID, BrokerData, ClusterInfo, QueueData, TopicRouteData
from rocketspark.protocol.body.topic import DataVersion, Perm, TopicConfig, TopicConfigSerializeWrapper

log = logging.getLogger(__name__)

DEFAULT_BROKER_EXPIRED_MS = 120_000


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class BrokerAddrInfo:
    cluster: str
    address: str


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update_ms: int
    timeout_ms: int
    data_version: DataVersion
    channel: Any  # the connection the broker registered on; closing it unregisters the broker
    ha_server_addr: str


@dataclass(frozen=True, slots=True)
class RegisterBrokerResult:
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(slots=True)
class RouteInfoManager:
    broker_expired_ms: int = DEFAULT_BROKER_EXPIRED_MS
    clock: Callable[[], int] = _now_ms
    topic_queue_table: dict[str, dict[str, QueueData]] = field(default_factory=dict)
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)
    broker_live_table: dict[BrokerAddrInfo, BrokerLiveInfo] = field(default_factory=dict)
    filter_server_table: dict[BrokerAddrInfo, list[str]] = field(default_factory=dict)

    # -- registration ------------------------------------------------------------------------

    def register_broker(
        self,
        *,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_config_wrapper: TopicConfigSerializeWrapper | None,
        filter_server_list: list[str],
        channel: Any,
        timeout_ms: int | None = None,
    ) -> RegisterBrokerResult:
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)

        broker_data = self.broker_addr_table.get(broker_name)
        register_first = broker_data is None
        if broker_data is None:
            broker_data = BrokerData(cluster=cluster, broker_name=broker_name)
            self.broker_addr_table[broker_name] = broker_data
        # One address has one role: a slave promoted to master drops its old id first.
        for other_id, other_addr in list(broker_data.broker_addrs.items()):
            if other_addr == broker_addr and other_id != broker_id:
                del broker_data.broker_addrs[other_id]
        register_first = broker_data.broker_addrs.get(broker_id) is None or register_first
        broker_data.broker_addrs[broker_id] = broker_addr

        addr_info = BrokerAddrInfo(cluster, broker_addr)
        if (
            topic_config_wrapper is not None
            and broker_id == MASTER_ID
            and (
                register_first
                or self.is_broker_topic_config_changed(cluster, broker_addr, topic_config_wrapper.data_version)
            )
        ):
            for topic_config in topic_config_wrapper.topic_config_table.values():
                self._create_and_update_queue_data(broker_name, topic_config)
        data_version = topic_config_wrapper.data_version if topic_config_wrapper is not None else DataVersion()
        previous = self.broker_live_table.get(addr_info)
        self.broker_live_table[addr_info] = BrokerLiveInfo(
            last_update_ms=self.clock(),
            timeout_ms=timeout_ms or self.broker_expired_ms,
            data_version=data_version,
            channel=channel,
            ha_server_addr=ha_server_addr,
        )
        if previous is None:
            log.info(
                "new broker registered: %s %s (cluster %s, id %d)",
                broker_name,
                broker_addr,
                cluster,
                broker_id,
            )
        if filter_server_list:
            self.filter_server_table[addr_info] = list(filter_server_list)
        else:
            self.filter_server_table.pop(addr_info, None)

        if broker_id == MASTER_ID:
            return RegisterBrokerResult()
        master_addr = broker_data.broker_addrs.get(MASTER_ID)
        if master_addr is None:
            return RegisterBrokerResult()
        master_live = self.broker_live_table.get(BrokerAddrInfo(cluster, master_addr))
        return RegisterBrokerResult(master_live.ha_server_addr if master_live else None, master_addr)

    def _create_and_update_queue_data(self, broker_name: str, config: TopicConfig) -> None:
        queue_data = QueueData(
            broker_name=broker_name,
            read_queue_nums=config.read_queue_nums,
            write_queue_nums=config.write_queue_nums,
            perm=config.perm,
            topic_sys_flag=config.topic_sys_flag,
        )
        queues = self.topic_queue_table.setdefault(config.topic_name, {})
        existing = queues.get(broker_name)
        if existing != queue_data:
            if existing is None:
                log.info("new topic registered: %s on %s", config.topic_name, broker_name)
            queues[broker_name] = queue_data

    def is_broker_topic_config_changed(self, cluster: str, broker_addr: str, data_version: DataVersion) -> bool:
        live = self.broker_live_table.get(BrokerAddrInfo(cluster, broker_addr))
        return live is None or live.data_version != data_version

    def query_data_version(self, cluster: str, broker_addr: str) -> DataVersion | None:
        """The broker's last registered data version; counts as a sign of life, as in Java."""
        live = self.broker_live_table.get(BrokerAddrInfo(cluster, broker_addr))
        if live is None:
            return None
        live.last_update_ms = self.clock()
        return live.data_version

    def unregister_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        addr_info = BrokerAddrInfo(cluster, broker_addr)
        self.broker_live_table.pop(addr_info, None)
        self.filter_server_table.pop(addr_info, None)
        log.info("broker unregistered: %s %s (cluster %s, id %d)", broker_name, broker_addr, cluster, broker_id)
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            return
        if broker_data.broker_addrs.get(broker_id) == broker_addr:
            del broker_data.broker_addrs[broker_id]
        if broker_data.broker_addrs:
            return
        del self.broker_addr_table[broker_name]
        names = self.cluster_addr_table.get(broker_data.cluster)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[broker_data.cluster]
        for topic, queues in list(self.topic_queue_table.items()):
            if queues.pop(broker_name, None) is not None and not queues:
                log.info("topic %s has no broker left; removed", topic)
                del self.topic_queue_table[topic]

    def on_channel_destroy(self, channel: Any) -> None:
        """A broker's connection closed: forget it at once, as Java's `onChannelDestroy`."""
        for addr_info, live in list(self.broker_live_table.items()):
            if live.channel is channel:
                log.info("connection of broker %s closed", addr_info.address)
                self._remove_broker_at(addr_info)

    def scan_not_active_brokers(self) -> list[str]:
        """Drop brokers silent for longer than their timeout; returns their addresses."""
        now = self.clock()
        expired = [a for a, live in self.broker_live_table.items() if live.last_update_ms + live.timeout_ms < now]
        for addr_info in expired:
            live = self.broker_live_table[addr_info]
            log.warning(
                "broker %s expired: no registration for %d ms (limit %d ms)",
                addr_info.address,
                now - live.last_update_ms,
                live.timeout_ms,
            )
            if live.channel is not None:
                live.channel.close("broker registration expired")
            self._remove_broker_at(addr_info)
        return [a.address for a in expired]

    def _remove_broker_at(self, addr_info: BrokerAddrInfo) -> None:
        for broker_data in list(self.broker_addr_table.values()):
            for broker_id, address in list(broker_data.broker_addrs.items()):
                if address == addr_info.address and broker_data.cluster == addr_info.cluster:
                    self.unregister_broker(addr_info.cluster, address, broker_data.broker_name, broker_id)
                    return
        self.broker_live_table.pop(addr_info, None)
        self.filter_server_table.pop(addr_info, None)

    # -- queries -----------------------------------------------------------------------------

    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        route = TopicRouteData()
        for broker_name in sorted(queues):
            queue_data = queues[broker_name]
            route.queue_datas.append(
                QueueData(
                    queue_data.broker_name,
                    queue_data.read_queue_nums,
                    queue_data.write_queue_nums,
                    queue_data.perm,
                    queue_data.topic_sys_flag,
                )
            )
            broker_data = self.broker_addr_table.get(broker_name)
            if broker_data is None:
                continue
            route.broker_datas.append(
                BrokerData(broker_data.cluster, broker_data.broker_name, dict(broker_data.broker_addrs))
            )
            for address in broker_data.broker_addrs.values():
                servers = self.filter_server_table.get(BrokerAddrInfo(broker_data.cluster, address))
                if servers:
                    route.filter_server_table[address] = list(servers)
        return route if route.broker_datas else None

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            broker_addr_table={
                name: BrokerData(data.cluster, data.broker_name, dict(data.broker_addrs))
                for name, data in sorted(self.broker_addr_table.items())
            },
            cluster_addr_table={cluster: sorted(names) for cluster, names in sorted(self.cluster_addr_table.items())},
        )

    def all_topics(self) -> list[str]:
        return sorted(self.topic_queue_table)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        names = self.cluster_addr_table.get(cluster, set())
        return sorted(topic for topic, queues in self.topic_queue_table.items() if names & queues.keys())

    # -- administration ----------------------------------------------------------------------

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        if cluster is None:
            self.topic_queue_table.pop(topic, None)
            return
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return
        for broker_name in self.cluster_addr_table.get(cluster, set()):
            queues.pop(broker_name, None)
        if not queues:
            del self.topic_queue_table[topic]

    def wipe_write_perm(self, broker_name: str) -> int:
        """Make a broker read-only for every topic (before maintenance); returns the topic count."""
        return self._update_write_perm(broker_name, allow=False)

    def add_write_perm(self, broker_name: str) -> int:
        return self._update_write_perm(broker_name, allow=True)

    def _update_write_perm(self, broker_name: str, allow: bool) -> int:
        count = 0
        for queues in self.topic_queue_table.values():
            queue_data = queues.get(broker_name)
            if queue_data is not None:
                queue_data.perm = (queue_data.perm | Perm.WRITE) if allow else (queue_data.perm & ~Perm.WRITE)
                count += 1
        return count
