"""Broker information: GET_BROKER_CONFIG (26), GET_BROKER_RUNTIME_INFO (28) and
VIEW_BROKER_STATS_DATA (315).

The runtime info carries Apache RocketMQ 4.9's keys that tools read (`brokerVersionDesc`,
`bootTimestamp`, `runtime`, `putTps`, `getTransferedTps`, `msgPutTotalTodayNow`,
`msgGetTotalTodayNow`, `commitLogDiskRatio`, `consumeQueueDiskRatio`, `commitLogDirCapacity`,
`commitLogMinOffset`, `commitLogMaxOffset`) in Apache's formats, besides this broker's own.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Protocol

import orjson

from broker.context import HasConfig, HasHold, HasStats, HasStore, HasStoreConfig, HasTopics, HasTransactions
from broker.memory import memory_use
from rocketspark import __version__
from rocketspark.protocol.body.kv import KVTable
from rocketspark.protocol.body.stats import BrokerStatsData
from rocketspark.protocol.codes import CURRENT_VERSION, RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.admin import ViewBrokerStatsDataRequestHeader
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable
from rocketspark.settings import describe


class BrokerAdminContext(HasConfig, HasStoreConfig, HasTopics, HasStore, HasStats, HasHold, HasTransactions, Protocol):
    """What BrokerAdminProcessor reads of the broker."""


class BrokerAdminProcessor:
    def __init__(self, broker: BrokerAdminContext) -> None:
        self.broker = broker

    def register(self, table: ProcessorTable) -> None:
        table.register(RequestCode.GET_BROKER_CONFIG, self.broker_config)
        table.register(RequestCode.GET_BROKER_RUNTIME_INFO, self.runtime_info)
        table.register(RequestCode.VIEW_BROKER_STATS_DATA, self.stats_data)

    def broker_config(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        settings = describe(self.broker.config) | describe(self.broker.store_config)
        body = "".join(f"{key}={value}\n" for key, value in sorted(settings.items()))
        response = request.response(body=body.encode())
        response.ext_fields["version"] = self.broker.topics.data_version.to_json().decode()
        return response

    async def runtime_info(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        """Ours besides RocketMQ's keys: `transactionHalfMessages`, a JSON object, per topic the half
        messages not ended; `memory*`, what each allocator holds (`broker.memory.MemoryUse`)."""
        broker = self.broker
        store = broker.store
        appender = store.appender
        table = {
            "brokerVersionDesc": f"rocketspark {__version__}",
            "brokerVersion": str(CURRENT_VERSION),
            "bootTimestamp": str(broker.stats.boot_timestamp),
            "runtime": runtime_text(int(time.time() * 1000) - broker.stats.boot_timestamp),
            "putTps": broker.stats.sampling.rates["put"].describe(),
            "getTransferedTps": broker.stats.sampling.rates["get"].describe(),
            "msgPutTotalTodayNow": str(broker.stats.stored_messages),
            "msgGetTotalTodayNow": str(broker.stats.pulled_messages()),
            "commitLogMinOffset": str(store.commit_log.min_offset),
            "commitLogMaxOffset": str(store.commit_log.max_offset),
            "commitLogSegments": str(len(store.commit_log.segments)),
            "flushDiskType": store.config.flush_disk_type.name,
            "groupCommitRounds": str(appender.rounds),
            "groupCommitFsyncs": str(appender.fsyncs),
            "heldPullRequests": str(broker.hold.held_count),
            "arrowEnable": "true" if broker.config.arrow_enable else "false",
            "transactionHalfMessages": orjson.dumps(
                dict(sorted((await broker.transactions.waiting()).items()))
            ).decode(),
        }
        table.update(broker.stats.as_table())
        table.update(memory_use().as_table())
        table.update(disk_figures(broker.store_config.commit_log_dir, broker.store_config.store_path_root_dir))
        return request.response(body=KVTable(table).to_json())

    def stats_data(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        """Apache's figures of one stats item over the last minute, hour and day; SYSTEM_ERROR for a
        name or key without an item (a topic nothing was stored in since the broker started). The
        one name served: TOPIC_PUT_NUMS (messages stored, by topic)."""
        header = request.decode_header(ViewBrokerStatsDataRequestHeader)
        item = self.broker.stats.sampling.item(header.stats_name, header.stats_key)
        if item is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"The stats <{header.stats_name}> <{header.stats_key}> not exist"
            )
        data = BrokerStatsData(item.figure(item.minute), item.figure(item.hour), item.figure(item.day))
        return request.response(body=data.to_json())


def runtime_text(elapsed_ms: int) -> str:
    """Apache's `runtime`: `[ 0 days, 1 hours, 2 minutes, 3 seconds ]`."""
    seconds = max(0, elapsed_ms) // 1000
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {seconds} seconds ]"


def disk_figures(commit_log_dir: Path, root_dir: Path) -> dict[str, str]:
    """The used share of the partitions of the commit log and the store (Apache's ratio: used over
    used plus what is usable, rounded up to a hundredth; -1 for a path that is not there), and the
    store root's capacity in Apache's text."""

    def ratio(path: Path) -> tuple[float, int, int]:
        try:
            fs = os.statvfs(path)
        except OSError:
            return -1.0, 0, 0
        total, free, usable = fs.f_blocks * fs.f_frsize, fs.f_bfree * fs.f_frsize, fs.f_bavail * fs.f_frsize
        used = total - free
        entire = used + usable
        if entire <= 0:
            return -1.0, total, usable
        return -(-used * 100 // entire) / 100, total, usable

    commit_log, _, _ = ratio(commit_log_dir)
    consume_queues, total, usable = ratio(root_dir)
    figures = {"commitLogDiskRatio": repr(commit_log), "consumeQueueDiskRatio": repr(consume_queues)}
    if total:
        figures["commitLogDirCapacity"] = f"Total : {byte_count(total)}, Free : {byte_count(usable)}."
    return figures


def byte_count(size: int) -> str:
    """Apache's MixAll.humanReadableByteCount(size, false): `512 B`, `1.5 KiB`, `20.0 GiB`."""
    if size < 1024:
        return f"{size} B"
    exponent = 0
    value = float(size)
    while value >= 1024 and exponent < 6:
        value /= 1024
        exponent += 1
    return f"{value:.1f} {'KMGTPE'[exponent - 1]}iB"
