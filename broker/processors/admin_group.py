"""Consumer groups for admin tools: GET_ALL_CONSUMER_OFFSET (43), every committed offset,
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), every subscription group, both in Apache RocketMQ's JSON, and
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), a group's config from the same JSON (as `mqadmin
updateSubGroup` sends it: retryMaxTimes, consumeMessageOrderly for 5.x FIFO consumers, ...)."""

from __future__ import annotations

import logging
from typing import Protocol

from broker.context import HasConsumerOffsets, HasSubscriptionGroups
from broker.managers.subscription_group_manager import SubscriptionGroupConfig, SubscriptionGroupWrapper
from rocketspark.errors import DecodeError, ValidationError
from rocketspark.message.validation import validate_group
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable

log = logging.getLogger(__name__)


class GroupAdminContext(HasConsumerOffsets, HasSubscriptionGroups, Protocol):
    """What GroupAdminProcessor reads of the broker."""


class GroupAdminProcessor:
    def __init__(self, broker: GroupAdminContext) -> None:
        self.broker = broker

    def register(self, table: ProcessorTable) -> None:
        table.register(RequestCode.GET_ALL_CONSUMER_OFFSET, self.all_consumer_offsets)
        table.register(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self.all_subscription_groups)
        table.register(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, self.create_subscription_group)

    def all_consumer_offsets(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=self.broker.consumer_offsets.encode())

    def all_subscription_groups(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        groups = self.broker.subscription_groups
        return request.response(body=SubscriptionGroupWrapper(dict(groups.table), groups.data_version).to_json())

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
