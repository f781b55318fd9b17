"""Source offsets: `{"topic": {"brokerName": {"queueId": offset}}}` in a canonical order.

Spark stores the offset dict as JSON in the checkpoint and compares offsets by their JSON text, so
keys are strings and always come in the same order: topics, then broker names, sorted; queue ids
numerically. Offsets are "next offset to read" (RocketMQ's consumer-offset meaning).

The end of a stream's first batch (batch 0) also carries the start the query resolved, under
`START_KEY` (no topic can have that name): Spark's offset log keeps only each batch's end, and when
it runs batch 0 again after a crash it takes the batch's start from `initialOffset()`, which would
resolve `latest` (or a group's offsets) afresh. The reader plans batch 0 from the start its end
carries (`start_of`), so the replay reads the same range.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rocketspark.errors import ConfigError
from rocketspark.protocol.queue import MessageQueue

OffsetDict = dict[str, dict[str, dict[str, int]]]

#: the key under which batch 0's end carries the query's start (RocketMQ topics are [%|a-zA-Z0-9_-])
START_KEY = "@start"
EARLIEST = -2  # in startingOffsets JSON: the queue's min offset
LATEST = -1  # the queue's max offset


def to_dict(offsets: Mapping[MessageQueue, int]) -> OffsetDict:
    result: OffsetDict = {}
    for queue in sorted(offsets):
        result.setdefault(queue.topic, {}).setdefault(queue.broker_name, {})[str(queue.queue_id)] = int(offsets[queue])
    return result


def with_start(end: OffsetDict, start: Mapping[str, Any]) -> dict[str, Any]:
    """Batch 0's end: `end` carrying the query's `start` (see the module docstring)."""
    return {**end, START_KEY: dict(start)}


def start_of(end: Mapping[str, Any]) -> dict[MessageQueue, int] | None:
    """The start a batch's end carries (batch 0's), or None."""
    start = end.get(START_KEY)
    return None if start is None else from_dict(start, source=f"the {START_KEY} of an offset")


def from_dict(data: Mapping[str, Any], *, source: str = "offset") -> dict[MessageQueue, int]:
    """The offsets of a dict in the shape above (a carried start aside); ConfigError naming `source`
    when it is not one."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source} must be a JSON object {{topic: {{brokerName: {{queueId: offset}}}}}}")
    offsets: dict[MessageQueue, int] = {}
    for topic, brokers in data.items():
        if topic == START_KEY:
            continue
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
