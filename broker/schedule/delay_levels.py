"""Delay levels: how a delayed message is parked in SCHEDULE_TOPIC_XXXX and how it comes back.

As in Apache RocketMQ, a message whose DELAY property names level n > 0 is stored in queue n - 1 of
SCHEDULE_TOPIC_XXXX with its real topic and queue in the REAL_TOPIC and REAL_QID properties (a level
above the highest configured one counts as the highest). When its delay has passed since it was
stored, the schedule service (broker/schedule/service.py) stores it again, in its real queue,
without DELAY and with SCHEDULE_ORIGIN, `<level>:<offset>` of the SCHEDULE_TOPIC_XXXX message it
comes from, by which the service recognises its own deliveries in the commit log after a crash.
The delay of each level is the broker.conf key messageDelayLevel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from broker.store.writer.append_requests import StandardMessage
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import SCHEDULE_TOPIC

#: on a delivered message: `<level>:<offset>` of the SCHEDULE_TOPIC_XXXX message it was stored from
ORIGIN = props.SCHEDULE_ORIGIN
_ORIGIN_PATTERN = (
    f"(?:^|{props.PROPERTY_SEPARATOR}){ORIGIN}{props.NAME_VALUE_SEPARATOR}(?P<level>[0-9]+):(?P<offset>[0-9]+)"
)


@dataclass(frozen=True, slots=True)
class DelayLevels:
    """The delay of each level in ms: element 0 is level 1."""

    delays_ms: tuple[int, ...]

    @property
    def max_level(self) -> int:
        return len(self.delays_ms)

    def clamp(self, level: int) -> int:
        return min(level, self.max_level)

    def delay_ms(self, level: int) -> int:
        return self.delays_ms[self.clamp(level) - 1]

    def schedule(
        self, topic: str, queue_id: int, message: StandardMessage, level: int
    ) -> tuple[str, int, StandardMessage]:
        """Where a message delayed by `level` (> 0) is stored until it is due, and as what."""
        level = self.clamp(level)
        parked = message.with_properties(
            {
                props.DELAY_TIME_LEVEL: str(level),
                props.REAL_TOPIC: topic,
                props.REAL_QUEUE_ID: str(queue_id),
                ORIGIN: None,  # a retried message's earlier delivery
            }
        )
        return SCHEDULE_TOPIC, level - 1, parked


def due_message(row: Mapping[str, Any], level: int) -> tuple[str, int, StandardMessage]:
    """The real topic, queue and message of a stored SCHEDULE_TOPIC_XXXX row (STORED_SCHEMA) of
    delay level `level`."""
    properties = props.decode_properties(row["properties"])
    topic = properties.get(props.REAL_TOPIC)
    queue_id = properties.get(props.REAL_QUEUE_ID, "")
    if not topic or not queue_id.isdigit():
        raise ValueError(f"scheduled message {row['msg_id']} names no real topic and queue")
    message = StandardMessage.from_stored(row)
    origin = f"{level}:{row['queue_offset']}"
    return topic, int(queue_id), message.with_properties({props.DELAY_TIME_LEVEL: None, ORIGIN: origin})


def delivered_origins(batch: pa.RecordBatch) -> list[tuple[int, int]]:
    """(level, SCHEDULE_TOPIC_XXXX offset) of the deliveries among stored messages (STORED_SCHEMA)."""
    delivered = pc.not_equal(batch.column("topic"), SCHEDULE_TOPIC)
    origins = pc.extract_regex(pc.filter(batch.column("properties"), delivered), _ORIGIN_PATTERN)
    found = pc.filter(origins, pc.is_valid(origins))
    levels, offsets = found.field("level").to_pylist(), found.field("offset").to_pylist()
    return [(int(level), int(offset)) for level, offset in zip(levels, offsets, strict=True)]
