"""HEART_BEAT (34) and UNREGISTER_CLIENT (35): which clients run which groups, on which connection."""

from __future__ import annotations

import logging
import time
from typing import Protocol

from broker.context import HasConsumers, HasProducers, HasSubscriptionGroups, HasTopics
from broker.managers.client_channel import ClientChannelInfo
from rocketspark.message.validation import retry_topic, validate_group
from rocketspark.protocol.body.heartbeat import HeartbeatData, MessageModel
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.client import UnregisterClientRequestHeader
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable

log = logging.getLogger(__name__)


class ClientManageContext(HasTopics, HasSubscriptionGroups, HasConsumers, HasProducers, Protocol):
    """What ClientManageProcessor reads of the broker."""


class ClientManageProcessor:
    def __init__(self, broker: ClientManageContext) -> None:
        self.broker = broker

    def register(self, table: ProcessorTable) -> None:
        table.register(RequestCode.HEART_BEAT, self.heartbeat)
        table.register(RequestCode.UNREGISTER_CLIENT, self.unregister)

    def heartbeat(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        data = HeartbeatData.from_json(request.body)
        groups = [c.group_name for c in data.consumer_data_set] + [p.group_name for p in data.producer_data_set]
        for group in groups:
            validate_group(group)  # a consumer group also names its %RETRY% topic
        broker = self.broker
        channel = ClientChannelInfo(
            connection, data.client_id, request.language, request.version, int(time.time() * 1000)
        )
        for consumer in data.consumer_data_set:
            group_config = broker.subscription_groups.find(consumer.group_name)
            notify = True
            if group_config is not None:
                notify = group_config.notify_consumer_ids_changed_enable
                if consumer.message_model is MessageModel.CLUSTERING:
                    broker.topics.create_internal_topic(retry_topic(consumer.group_name), group_config.retry_queue_nums)
            broker.consumers.register(
                consumer.group_name,
                channel,
                consume_type=consumer.consume_type,
                message_model=consumer.message_model,
                consume_from_where=consumer.consume_from_where,
                subscriptions=consumer.subscription_data_set,
                notify=notify,
            )
        for producer in data.producer_data_set:
            broker.producers.register(producer.group_name, channel)
        return request.response()

    def unregister(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(UnregisterClientRequestHeader)
        if header.producer_group:
            self.broker.producers.unregister(header.producer_group, connection)
        if header.consumer_group:
            group_config = self.broker.subscription_groups.table.get(header.consumer_group)
            notify = group_config.notify_consumer_ids_changed_enable if group_config else True
            self.broker.consumers.unregister(header.consumer_group, connection, notify)
        return request.response()
