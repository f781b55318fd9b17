"""Consumer groups for admin tools: GET_ALL_CONSUMER_OFFSET (43), every committed offset, and
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), every subscription group, both in Apache RocketMQ's JSON."""

from __future__ import annotations

from typing import Protocol

from broker.context import HasConsumerOffsets, HasSubscriptionGroups
from broker.managers.subscription_group_manager import SubscriptionGroupWrapper
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable


class GroupAdminContext(HasConsumerOffsets, HasSubscriptionGroups, Protocol):
    """What GroupAdminProcessor reads of the broker."""


class GroupAdminProcessor:
    def __init__(self, broker: GroupAdminContext) -> None:
        self.broker = broker

    def register(self, table: ProcessorTable) -> None:
        table.register(RequestCode.GET_ALL_CONSUMER_OFFSET, self.all_consumer_offsets)
        table.register(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self.all_subscription_groups)

    def all_consumer_offsets(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=self.broker.consumer_offsets.encode())

    def all_subscription_groups(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        groups = self.broker.subscription_groups
        return request.response(body=SubscriptionGroupWrapper(dict(groups.table), groups.data_version).to_json())
