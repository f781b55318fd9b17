"""Topic configuration of the broker: system topics, auto-creation from TBW102, persistence.

`config/topics.json` has Java's `TopicConfigSerializeWrapper` shape and is replaced atomically on
every change, on the config I/O thread. Every change bumps the data version and calls `on_change`,
which re-registers the broker with its name servers, so a topic auto-created by a send is routable
at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from broker.config import BrokerConfig
from broker.flavor import Flavor
from rocketspark.errors import ValidationError
from rocketspark.fileutil import AtomicFileWriter
from rocketspark.message.validation import AUTO_CREATE_TOPIC_KEY, SELF_TEST_TOPIC, TIMER_TOPIC
from rocketspark.protocol.body.topic import DEFAULT_PERM, DataVersion, Perm, TopicConfig, TopicConfigSerializeWrapper
from rocketspark.protocol.codes import ResponseCode

log = logging.getLogger(__name__)


class TopicConfigManager:
    def __init__(self, config: BrokerConfig, writer: AtomicFileWriter, on_change: Callable[[], None]) -> None:
        self.config = config
        self.writer = writer
        self.path = writer.path
        self.on_change = on_change
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()

    def load(self) -> None:
        if self.path.exists():
            wrapper = TopicConfigSerializeWrapper.from_json(self.path.read_bytes())
            self.table = dict(wrapper.topic_config_table)
            self.data_version = wrapper.data_version
            log.info("loaded %d topic configs from %s", len(self.table), self.path)
        self._ensure_system_topics()

    def _ensure_system_topics(self) -> None:
        system = [TopicConfig(SELF_TEST_TOPIC, 1, 1)]
        if self.config.auto_create_topic_enable:
            queues = self.config.default_topic_queue_nums
            system.append(TopicConfig(AUTO_CREATE_TOPIC_KEY, queues, queues, Perm.INHERIT | DEFAULT_PERM))
        # Java creates a topic named after the cluster and one after the broker, so clients can
        # address "any broker of this cluster" or "this broker" by topic.
        system.append(TopicConfig(self.config.broker_cluster_name, 16, 16))
        system.append(TopicConfig(self.config.broker_name, 1, 1))
        if self.config.flavor is not Flavor.apache:  # where timer messages wait (Apache 5 makes it so)
            system.append(TopicConfig(TIMER_TOPIC, 1, 1))
        changed = False
        for topic in system:
            if topic.topic_name not in self.table:
                self.table[topic.topic_name] = topic
                changed = True
        if not self.config.auto_create_topic_enable and AUTO_CREATE_TOPIC_KEY in self.table:
            del self.table[AUTO_CREATE_TOPIC_KEY]
            changed = True
        if changed:
            self._changed()

    def wrapper(self) -> TopicConfigSerializeWrapper:
        return TopicConfigSerializeWrapper(dict(self.table), self.data_version)

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def create_in_send(
        self, topic: str, default_topic: str, client_queue_nums: int, topic_sys_flag: int = 0
    ) -> TopicConfig:
        """The topic, created from its default topic (TBW102) as Java's
        `createTopicInSendMessageMethod` does; raises when auto-creation is not allowed."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        template = self.table.get(default_topic)
        if template is None or not (template.perm & Perm.INHERIT):
            raise ValidationError(
                f"topic {topic} does not exist on broker {self.config.broker_name} and automatic topic creation is "
                f"{'off (autoCreateTopicEnable=false)' if not self.config.auto_create_topic_enable else 'not allowed'}"
                "; create it first",
                code=ResponseCode.TOPIC_NOT_EXIST,
            )
        queues = max(1, min(client_queue_nums, template.write_queue_nums))
        created = TopicConfig(topic, queues, queues, template.perm & ~Perm.INHERIT, topic_sys_flag=topic_sys_flag)
        log.info("topic %s created on first send from %s with %d queues", topic, default_topic, queues)
        return self.put(created)

    def create_internal_topic(self, topic: str, queue_nums: int) -> TopicConfig:
        """A group's %RETRY% or %DLQ% topic, or RMQ_SYS_TRANS_HALF_TOPIC, created readable and
        writable (perm 6) when missing, so consumers, tools and Spark can read it and clients can
        send to it (to the half topic, as half messages only)."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        log.info("topic %s created with %d queue(s)", topic, queue_nums)
        return self.put(TopicConfig(topic, queue_nums, queue_nums, DEFAULT_PERM))

    def put(self, topic_config: TopicConfig) -> TopicConfig:
        if self.table.get(topic_config.topic_name) != topic_config:
            self.table[topic_config.topic_name] = topic_config
            self._changed()
        return topic_config

    def delete(self, topic: str) -> bool:
        if self.table.pop(topic, None) is None:
            return False
        log.info("topic %s deleted", topic)
        self._changed()
        return True

    def _changed(self) -> None:
        self.data_version = self.data_version.next()
        self.writer.write(self.wrapper().to_json())
        self.on_change()
