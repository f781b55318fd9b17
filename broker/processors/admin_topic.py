"""Topic administration: UPDATE_AND_CREATE_TOPIC (17), GET_ALL_TOPIC_CONFIG (21),
GET_TOPIC_STATS_INFO (202), DELETE_TOPIC_IN_BROKER (215)."""

from __future__ import annotations

import logging
from typing import Protocol

from broker.context import HasConfig, HasConsumerOffsets, HasStore, HasTopics
from rocketspark.errors import ValidationError
from rocketspark.message.validation import SYSTEM_TOPICS, validate_topic
from rocketspark.protocol.body.jsonbody import loads
from rocketspark.protocol.body.stats import TopicOffset, TopicStatsTable
from rocketspark.protocol.body.topic import TopicConfig, TopicFilterType
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.admin import CreateTopicRequestHeader, TopicRequestHeader
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable

log = logging.getLogger(__name__)


class TopicAdminContext(HasConfig, HasTopics, HasStore, HasConsumerOffsets, Protocol):
    """What TopicAdminProcessor reads of the broker."""


class TopicAdminProcessor:
    def __init__(self, broker: TopicAdminContext) -> None:
        self.broker = broker

    def register(self, table: ProcessorTable) -> None:
        table.register(RequestCode.UPDATE_AND_CREATE_TOPIC, self.create_topic)
        table.register(RequestCode.GET_ALL_TOPIC_CONFIG, self.all_topic_config)
        table.register(RequestCode.GET_TOPIC_STATS_INFO, self.topic_stats)
        table.register(RequestCode.DELETE_TOPIC_IN_BROKER, self.delete_topic)

    def _check_user_topic(self, topic: str) -> None:
        validate_topic(topic)
        if topic in SYSTEM_TOPICS or topic in (
            self.broker.config.broker_cluster_name,
            self.broker.config.broker_name,
        ):
            raise ValidationError(f"the topic {topic} is reserved by the system", code=ResponseCode.INVALID_PARAMETER)

    async def create_topic(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(CreateTopicRequestHeader)
        self._check_user_topic(header.topic)
        if header.read_queue_nums <= 0 or header.write_queue_nums <= 0:
            raise ValidationError(
                f"queue counts must be positive (read {header.read_queue_nums}, write {header.write_queue_nums})",
                code=ResponseCode.INVALID_PARAMETER,
            )
        try:
            filter_type = TopicFilterType[header.topic_filter_type]
        except KeyError:
            raise ValidationError(
                f"unknown topicFilterType {header.topic_filter_type!r}", code=ResponseCode.INVALID_PARAMETER
            ) from None
        attributes = {str(k): str(v) for k, v in (loads(header.attributes) if header.attributes else {}).items()}
        config = TopicConfig(
            header.topic,
            header.read_queue_nums,
            header.write_queue_nums,
            header.perm,
            filter_type,
            header.topic_sys_flag or 0,
            header.order,
            attributes,
        )
        self.broker.topics.put(config)
        await self.broker.topics.writer.flush()  # acknowledged only once it survives a kill -9
        log.info("topic %s created or updated by %s: %s", header.topic, connection.remote_address, config)
        return request.response()

    def all_topic_config(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=self.broker.topics.wrapper().to_json())

    async def topic_stats(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(TopicRequestHeader)
        config = self.broker.topics.get(header.topic)
        if config is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist")
        table = TopicStatsTable()
        for queue_id in range(config.write_queue_nums):
            stats = await self.broker.store.queue_stats(header.topic, queue_id)
            queue = MessageQueue(header.topic, self.broker.config.broker_name, queue_id)
            table.offset_table[queue] = TopicOffset(stats.min_offset, stats.max_offset, stats.last_store_timestamp)
        return request.response(body=table.to_json())

    async def delete_topic(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(TopicRequestHeader)
        self._check_user_topic(header.topic)
        self.broker.topics.delete(header.topic)
        await self.broker.topics.writer.flush()
        await self.broker.store.delete_topic(header.topic)
        self.broker.consumer_offsets.delete_topic(header.topic)
        return request.response()
