"""Bodies of consumer-group requests: member lists and orderly-consumption queue locks."""

from __future__ import annotations

from dataclasses import dataclass, field

from rocketspark.protocol.body.jsonbody import JsonBody
from rocketspark.protocol.queue import MessageQueue
from rocketspark.protocol.schema import wire


@dataclass(slots=True)
class ConsumerListBody(JsonBody):
    consumer_id_list: list[str] = field(default_factory=list)


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
