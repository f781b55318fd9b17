"""Consumer groups for admin tools, as Apache RocketMQ 4.9's AdminBrokerProcessor answers them:
GET_ALL_CONSUMER_OFFSET (43), every committed offset; GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), every
subscription group; UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), a group's config from the same JSON (as
`mqadmin updateSubGroup` sends it: retryMaxTimes, consumeMessageOrderly for 5.x FIFO consumers, ...);
GET_CONSUMER_CONNECTION_LIST (203), a group's members online (4.x and 5.x); INVOKE_BROKER_TO_RESET_OFFSET
(222), a group's offsets of a topic reset to a time by its members.

A reset is Apache's Broker2Client.resetOffset: per write queue of the topic, the offset of the time
(the max offset for timestamp -1), kept at the committed one when that is lower unless forced; the
offsets are sent to every member online (RESET_CONSUMER_CLIENT_OFFSET, oneway), which reset their
own position and commit it. The broker commits nothing itself: with no member online the answer is
CONSUMER_NOT_ONLINE, and tools then commit the offsets themselves (UPDATE_CONSUMER_OFFSET), as
Apache's `mqadmin resetOffsetByTime` does.
"""

from __future__ import annotations

import logging
from typing import Protocol

from broker.context import HasConfig, HasConsumerOffsets, HasConsumers, HasStore, HasSubscriptionGroups, HasTopics
from broker.managers.subscription_group_manager import SubscriptionGroupConfig, SubscriptionGroupWrapper
from broker.processors.admin_offset import offset_of_time
from rocketspark.errors import DecodeError, RocketMQError, ValidationError
from rocketspark.message.validation import validate_group
from rocketspark.protocol.body.consumer import ClientConnection, ConsumerConnection
from rocketspark.protocol.body.stats import ResetOffsetBody
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.admin import ResetOffsetRequestHeader
from rocketspark.protocol.headers.client import ConsumerGroupRequestHeader
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable

log = logging.getLogger(__name__)


class GroupAdminContext(
    HasConfig, HasTopics, HasStore, HasConsumerOffsets, HasSubscriptionGroups, HasConsumers, Protocol
):
    """What GroupAdminProcessor reads of the broker."""


class GroupAdminProcessor:
    def __init__(self, broker: GroupAdminContext) -> None:
        self.broker = broker

    def register(self, table: ProcessorTable) -> None:
        table.register(RequestCode.GET_ALL_CONSUMER_OFFSET, self.all_consumer_offsets)
        table.register(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self.all_subscription_groups)
        table.register(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, self.create_subscription_group)
        table.register(RequestCode.GET_CONSUMER_CONNECTION_LIST, self.consumer_connections)
        table.register(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, self.reset_offset)

    def all_consumer_offsets(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=self.broker.consumer_offsets.encode())

    def all_subscription_groups(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        groups = self.broker.subscription_groups
        return request.response(body=SubscriptionGroupWrapper(dict(groups.table), groups.data_version).to_json())

    def consumer_connections(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(ConsumerGroupRequestHeader)
        info = self.broker.consumers.groups.get(header.consumer_group)
        if info is None:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{header.consumer_group}] not online"
            )
        body = ConsumerConnection(
            [
                ClientConnection(c.client_id, c.connection.remote_address, c.language.name, c.version)
                for c in sorted(info.channels.values(), key=lambda c: c.client_id)
            ],
            dict(info.subscriptions),
            info.consume_type,
            info.message_model,
            info.consume_from_where,
        )
        return request.response(body=body.to_json())

    async def reset_offset(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(ResetOffsetRequestHeader)
        broker = self.broker
        log.info(
            "reset offset started by %s: topic %r, group %r, timestamp %d, force %s",
            connection.remote_address,
            header.topic,
            header.group,
            header.timestamp,
            header.is_force,
        )
        config = broker.topics.get(header.topic)
        if config is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"[reset-offset] reset offset failed, no topic in this broker. topic={header.topic}",
            )
        offsets: dict[MessageQueue, int] = {}
        for queue_id in range(config.write_queue_nums):
            committed = broker.consumer_offsets.query(header.group, header.topic, queue_id)
            if committed is None:
                return request.response(ResponseCode.SYSTEM_ERROR, f"THe consumer group <{header.group}> not exist")
            if header.timestamp == -1:
                target = broker.store.max_offset(header.topic, queue_id)
            else:
                target = max(0, await offset_of_time(broker, header.topic, queue_id, header.timestamp))
            queue = MessageQueue(header.topic, broker.config.broker_name, queue_id)
            offsets[queue] = target if header.is_force or target < committed else committed
        info = broker.consumers.groups.get(header.group)
        if info is None or not info.channels:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"Consumer not online, so can not reset offset, Group: {header.group} Topic: {header.topic} "
                f"Timestamp: {header.timestamp}",
            )
        body = ResetOffsetBody(offsets).to_json()
        notice = ResetOffsetRequestHeader(header.topic, header.group, header.timestamp)
        for member in list(info.channels.values()):
            try:
                member.connection.invoke_oneway(
                    RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, notice, body=body)
                )
            except RocketMQError as exc:
                log.warning("could not tell %s to reset group %s: %s", member.client_id, header.group, exc)
        return request.response(body=body)

    async def create_subscription_group(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            config = SubscriptionGroupConfig.from_json(request.body or b"")
        except (DecodeError, ValueError, TypeError, KeyError) as exc:
            raise ValidationError(
                f"the body is no subscription group config (Apache's JSON, with groupName): {exc}",
                code=ResponseCode.INVALID_PARAMETER,
            ) from None
        validate_group(config.group_name)
        if config.retry_max_times < 0 or config.retry_queue_nums < 0:
            raise ValidationError(
                f"retryMaxTimes and retryQueueNums must not be negative, got {config.retry_max_times} and "
                f"{config.retry_queue_nums}",
                code=ResponseCode.INVALID_PARAMETER,
            )
        groups = self.broker.subscription_groups
        groups.put(config)
        await groups.writer.flush()  # acknowledged only once it survives a kill -9
        log.info(
            "subscription group %s created or updated by %s: %s", config.group_name, connection.remote_address, config
        )
        return request.response()
