"""Where a consumer starts on a queue: its stored offset, or the `ConsumeFromWhere` rule for new groups.

The rules of Java's `RebalancePushImpl.computePullFromWhereWithException` (reference §5.3):
a stored offset always wins; otherwise LAST_OFFSET starts at the queue's max offset (0 for retry
topics), FIRST_OFFSET at 0, TIMESTAMP at the first message stored at or after the timestamp (on
any broker: Java takes the broker's answer, which Apache gives as the entry nearest the time).
"""

from __future__ import annotations

from rocketspark.client.api import offset as offset_api
from rocketspark.client.consumer.offset_store import NO_OFFSET, OffsetStore, ReadOffsetType
from rocketspark.client.consumer.time_offsets import offset_for_time
from rocketspark.client.instance import ClientInstance
from rocketspark.errors import QueryNotFoundError, RocketMQError
from rocketspark.message.validation import RETRY_GROUP_TOPIC_PREFIX
from rocketspark.protocol.body.heartbeat import ConsumeFromWhere
from rocketspark.protocol.codes import ResponseCode
from rocketspark.protocol.queue import MessageQueue

_FROM_LAST = {
    ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
    ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST,
    ConsumeFromWhere.CONSUME_FROM_MIN_OFFSET,
    ConsumeFromWhere.CONSUME_FROM_MAX_OFFSET,
}


async def compute_start_offset(
    instance: ClientInstance,
    store: OffsetStore,
    queue: MessageQueue,
    consume_from_where: ConsumeFromWhere,
    consume_timestamp_ms: int,
) -> int:
    stored = await store.read_offset(queue, ReadOffsetType.READ_FROM_STORE)
    if stored >= 0:
        return stored
    if stored != NO_OFFSET:
        raise RocketMQError(f"could not read the stored offset of {queue} for group {store.group}")
    retry_topic = queue.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
    if consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return 0
    address = await instance.broker_address(queue.broker_name, queue.topic)
    if consume_from_where in _FROM_LAST:
        if retry_topic:
            return 0
        return await offset_api.get_max_offset(instance.remoting, address, queue.topic, queue.queue_id)
    if consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        if retry_topic:
            return await offset_api.get_max_offset(instance.remoting, address, queue.topic, queue.queue_id)
        return await offset_for_time(
            instance.remoting, address, store.group, queue.topic, queue.queue_id, consume_timestamp_ms
        )
    raise QueryNotFoundError(f"no start offset rule for {consume_from_where}", code=ResponseCode.QUERY_NOT_FOUND)
