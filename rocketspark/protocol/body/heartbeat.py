"""HEART_BEAT body: which producer and consumer groups a client runs, and their subscriptions."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from rocketspark.protocol.body.jsonbody import JsonBody
from rocketspark.protocol.schema import wire

SUBSCRIBE_ALL = "*"


class ConsumeType(enum.Enum):  # Java ordinals in declaration order; C++ clients send ordinals
    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"  # pull
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"  # push
    CONSUME_POP = "CONSUME_POP"


class MessageModel(enum.Enum):
    BROADCASTING = "BROADCASTING"
    CLUSTERING = "CLUSTERING"


class ConsumeFromWhere(enum.Enum):
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"
    CONSUME_FROM_MIN_OFFSET = "CONSUME_FROM_MIN_OFFSET"
    CONSUME_FROM_MAX_OFFSET = "CONSUME_FROM_MAX_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


@dataclass(slots=True)
class SubscriptionData(JsonBody):
    topic: str
    sub_string: str = SUBSCRIBE_ALL
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    @property
    def subscribes_all(self) -> bool:
        return not self.tags_set or SUBSCRIBE_ALL in self.tags_set


@dataclass(slots=True)
class ConsumerData(JsonBody):
    group_name: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscription_data_set: list[SubscriptionData] = field(default_factory=list)
    unit_mode: bool = False


@dataclass(slots=True)
class ProducerData(JsonBody):
    group_name: str


@dataclass(slots=True)
class HeartbeatData(JsonBody):
    client_id: str = field(metadata=wire("clientID"))
    producer_data_set: list[ProducerData] = field(default_factory=list)
    consumer_data_set: list[ConsumerData] = field(default_factory=list)
