"""What the cluster page (`/`) shows: the name servers, and per broker its address, version,
flavor, uptime, disk use and messages in and out per second.

Everything comes from GET_BROKER_CLUSTER_INFO (each name server), GET_BROKER_RUNTIME_INFO and
GET_BROKER_CONFIG (each broker), as Apache RocketMQ 4.9 answers them; the rates are the brokers'
own `putTps` and `getTransferedTps` (the last 10 s, else the last minute).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from rocketspark.client.api.admin import get_broker_config, get_runtime_info
from rocketspark.client.api.route import get_cluster_info
from rocketspark.dashboard.admin import BrokerFailure, ClusterAdmin
from rocketspark.errors import RocketMQError


@dataclass(frozen=True, slots=True)
class NamesrvRow:
    address: str
    error: str | None  # None: it answered


@dataclass(frozen=True, slots=True)
class BrokerRow:
    name: str
    address: str
    cluster: str
    error: str | None = None  # unreachable, or not registered any more: the figures below are unknown
    version: str = ""
    flavor: str = ""
    boot_ms: int = 0
    disk_ratio: float | None = None
    in_tps: float | None = None
    out_tps: float | None = None

    @property
    def uptime_s(self) -> int | None:
        return max(0, int(time.time() - self.boot_ms / 1000)) if self.boot_ms else None


@dataclass(frozen=True, slots=True)
class ClusterOverview:
    namesrvs: list[NamesrvRow]
    brokers: list[BrokerRow]

    @property
    def in_tps(self) -> float:
        return sum(b.in_tps or 0.0 for b in self.brokers)

    @property
    def out_tps(self) -> float:
        return sum(b.out_tps or 0.0 for b in self.brokers)


def first_rate(text: str | None) -> float | None:
    """The 10 s figure of Apache's `putTps` text (`10s 60s 600s`), else the 60 s one."""
    for part in (text or "").split(" ")[:2]:
        try:
            return float(part)
        except ValueError:
            continue
    return None


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None


def flavor_of(runtime: dict[str, str], config: dict[str, str]) -> str:
    """`rocketspark`, `apache` (the bundled broker's flavors) or `Apache RocketMQ` (any other broker)."""
    if runtime.get("brokerVersionDesc", "").startswith("rocketspark"):
        return config.get("flavor", "rocketspark")
    return "Apache RocketMQ"


async def broker_row(admin: ClusterAdmin, name: str, address: str, cluster: str) -> BrokerRow:
    async def figures(addr: str) -> tuple[dict[str, str], dict[str, str]]:
        runtime, config = await asyncio.gather(
            get_runtime_info(admin.remoting, addr), get_broker_config(admin.remoting, addr)
        )
        return runtime, config

    answer = (await admin.each_broker({name: address}, figures))[name]
    if isinstance(answer, BrokerFailure):
        return BrokerRow(name, address, cluster, error=f"unreachable: {answer.reason}")
    runtime, config = answer
    return BrokerRow(
        name,
        address,
        cluster,
        version=runtime.get("brokerVersionDesc", "?"),
        flavor=flavor_of(runtime, config),
        boot_ms=int(runtime.get("bootTimestamp", "0") or 0),
        disk_ratio=_float(runtime.get("commitLogDiskRatio")),
        in_tps=first_rate(runtime.get("putTps")),
        out_tps=first_rate(runtime.get("getTransferedTps")),
    )


async def namesrv_row(admin: ClusterAdmin, address: str) -> NamesrvRow:
    try:
        await admin.limited(get_cluster_info(admin.remoting, address))
    except RocketMQError as exc:
        return NamesrvRow(address, str(exc))
    return NamesrvRow(address, None)


async def cluster_overview(admin: ClusterAdmin) -> ClusterOverview:
    namesrvs = await asyncio.gather(*(namesrv_row(admin, address) for address in admin.namesrv))
    info = await admin.cluster()
    cluster_of = {name: cluster for cluster, names in info.cluster_addr_table.items() for name in names}
    masters = {name: data.master_address for name, data in info.broker_addr_table.items() if data.master_address}
    rows = list(
        await asyncio.gather(
            *(broker_row(admin, name, address, cluster_of.get(name, "")) for name, address in sorted(masters.items()))
        )
    )
    for gone in admin.gone(masters):
        seen = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(gone.last_seen_ms / 1000))
        rows.append(
            BrokerRow(gone.name, gone.address, gone.cluster, error=f"unreachable: not registered (last seen {seen})")
        )
    return ClusterOverview(list(namesrvs), sorted(rows, key=lambda row: row.name))
