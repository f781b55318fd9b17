"""Subscription group configuration, auto-created on first use as in Java, persisted atomically on the
config I/O thread."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from rocketspark.fileutil import AtomicFileWriter
from rocketspark.message.validation import DEFAULT_MAX_RECONSUME_TIMES
from rocketspark.protocol.body.jsonbody import JsonBody
from rocketspark.protocol.body.topic import DataVersion

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SubscriptionGroupConfig(JsonBody):
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = DEFAULT_MAX_RECONSUME_TIMES
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    # Apache 5: the group's 5.x consumers get messages of one message group one at a time, in order
    consume_message_orderly: bool = False


@dataclass(slots=True)
class SubscriptionGroupWrapper(JsonBody):
    subscription_group_table: dict[str, SubscriptionGroupConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)


class SubscriptionGroupManager:
    def __init__(self, writer: AtomicFileWriter, auto_create: bool) -> None:
        self.writer = writer
        self.path = writer.path
        self.auto_create = auto_create
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion()

    def load(self) -> None:
        if self.path.exists():
            wrapper = SubscriptionGroupWrapper.from_json(self.path.read_bytes())
            self.table = dict(wrapper.subscription_group_table)
            self.data_version = wrapper.data_version

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with defaults when auto-creation is on."""
        existing = self.table.get(group)
        if existing is None and self.auto_create:
            existing = SubscriptionGroupConfig(group)
            self.put(existing)
            log.info("subscription group %s created on first use", group)
        return existing

    def put(self, config: SubscriptionGroupConfig) -> None:
        self.table[config.group_name] = config
        self.data_version = self.data_version.next()
        self.writer.write(SubscriptionGroupWrapper(self.table, self.data_version).to_json())
