"""Route data served by name servers: which brokers hold a topic's queues, and the cluster map."""

from __future__ import annotations

from dataclasses import dataclass, field

from rocketspark.protocol.body.jsonbody import JsonBody
from rocketspark.protocol.body.topic import Perm

MASTER_ID = 0


@dataclass(slots=True)
class QueueData(JsonBody):
    """A topic's queues on one broker."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    @property
    def readable(self) -> bool:
        return bool(self.perm & Perm.READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & Perm.WRITE)


@dataclass(slots=True)
class BrokerData(JsonBody):
    """One broker group: its name, cluster, and addresses by broker id (0 = master)."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)
    zone_name: str | None = None
    enable_acting_master: bool = False

    @property
    def master_address(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)


@dataclass(slots=True)
class TopicRouteData(JsonBody):
    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    order_topic_conf: str | None = None


@dataclass(slots=True)
class ClusterInfo(JsonBody):
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = field(default_factory=dict)
