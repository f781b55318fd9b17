"""Bodies of consumer-group requests: member lists, a group's connections and orderly-consumption queue locks."""

from __future__ import annotations

from dataclasses import dataclass, field

from rocketspark.protocol.body.heartbeat import ConsumeFromWhere, ConsumeType, MessageModel, SubscriptionData
from rocketspark.protocol.body.jsonbody import JsonBody
from rocketspark.protocol.queue import MessageQueue
from rocketspark.protocol.schema import wire


@dataclass(slots=True)
class ConsumerListBody(JsonBody):
    consumer_id_list: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ClientConnection(JsonBody):
    """One member's connection, as Java's `Connection` (its language by name)."""

    client_id: str
    client_addr: str
    language: str
    version: int


@dataclass(slots=True)
class ConsumerConnection(JsonBody):
    """GET_CONSUMER_CONNECTION_LIST (203) body: a group's members online and what they subscribed."""

    connection_set: list[ClientConnection] = field(default_factory=list)
    subscription_table: dict[str, SubscriptionData] = field(default_factory=dict)
    consume_type: ConsumeType | None = None
    message_model: MessageModel | None = None
    consume_from_where: ConsumeFromWhere | None = None


@dataclass(slots=True)
class LockBatchRequestBody(JsonBody):
    """LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42)."""

    consumer_group: str
    client_id: str
    mq_set: list[MessageQueue] = field(default_factory=list)
    only_this_broker: bool = False


@dataclass(slots=True)
class LockBatchResponseBody(JsonBody):
    # Java's field is `lockOKMQSet`; strict readers (the C++ client) need exactly that key
    lock_ok_mq_set: list[MessageQueue] = field(default_factory=list, metadata=wire("lockOKMQSet"))
