"""Source offsets: `{"topic": {"brokerName": {"queueId": offset}}}` in a canonical order.

Spark stores the offset dict as JSON in the checkpoint and compares offsets by their JSON text, so
keys are strings and always come in the same order: topics, then broker names, sorted; queue ids
numerically. Offsets are "next offset to read" (RocketMQ's consumer-offset meaning).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rocketspark.errors import ConfigError
from rocketspark.protocol.queue import MessageQueue

OffsetDict = dict[str, dict[str, dict[str, int]]]

EARLIEST = -2  # in startingOffsets JSON: the queue's min offset
LATEST = -1  # the queue's max offset


def to_dict(offsets: Mapping[MessageQueue, int]) -> OffsetDict:
    result: OffsetDict = {}
    for queue in sorted(offsets):
        result.setdefault(queue.topic, {}).setdefault(queue.broker_name, {})[str(queue.queue_id)] = int(offsets[queue])
    return result


def from_dict(data: Mapping[str, Any], *, source: str = "offset") -> dict[MessageQueue, int]:
    """The offsets of a dict in the shape above; ConfigError naming `source` when it is not one."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source} must be a JSON object {{topic: {{brokerName: {{queueId: offset}}}}}}")
    offsets: dict[MessageQueue, int] = {}
    for topic, brokers in data.items():
        if not isinstance(brokers, Mapping):
            raise ConfigError(f"{source}: topic {topic!r} must map broker names to queues")
        for broker, queues in brokers.items():
            if not isinstance(queues, Mapping):
                raise ConfigError(f"{source}: {topic}/{broker} must map queue ids to offsets")
            for queue_id, offset in queues.items():
                try:
                    queue = MessageQueue(str(topic), str(broker), int(queue_id))
                    value = int(offset)
                except (TypeError, ValueError):
                    raise ConfigError(
                        f"{source}: {topic}/{broker}/{queue_id} = {offset!r} is not a queue offset"
                    ) from None
                if value < EARLIEST:
                    raise ConfigError(f"{source}: offset {value} of {queue} is below -2 (earliest)")
                offsets[queue] = value
    return offsets
