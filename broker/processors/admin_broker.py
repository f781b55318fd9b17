"""Broker information: GET_BROKER_CONFIG (26) and GET_BROKER_RUNTIME_INFO (28)."""

from __future__ import annotations

from typing import Protocol

import orjson

from broker.context import HasConfig, HasHold, HasStats, HasStore, HasStoreConfig, HasTopics, HasTransactions
from broker.memory import memory_use
from rocketspark import __version__
from rocketspark.protocol.body.kv import KVTable
from rocketspark.protocol.codes import CURRENT_VERSION, RequestCode
from rocketspark.protocol.command import RemotingCommand
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
        return request.response(body=KVTable(table).to_json())
