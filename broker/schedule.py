"""Delay levels: how a delayed message is parked in SCHEDULE_TOPIC_XXXX and how it comes back.

As in Apache RocketMQ, a message whose DELAY property names level n > 0 is stored in queue n - 1 of
SCHEDULE_TOPIC_XXXX with its real topic and queue in the REAL_TOPIC and REAL_QID properties (a level
above the highest configured one counts as the highest). When its delay has passed since it was
stored, the schedule service (broker/schedule_service.py) stores it again, in its real queue,
without DELAY. The delay of each level is the broker.conf key messageDelayLevel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker.store.append_requests import StandardMessage
from rocketspark.message import properties as props
from rocketspark.message.validation import SCHEDULE_TOPIC


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
            {props.DELAY_TIME_LEVEL: str(level), props.REAL_TOPIC: topic, props.REAL_QUEUE_ID: str(queue_id)}
        )
        return SCHEDULE_TOPIC, level - 1, parked


def due_message(row: Mapping[str, Any]) -> tuple[str, int, StandardMessage]:
    """The real topic, queue and message of a stored SCHEDULE_TOPIC_XXXX row (STORED_SCHEMA)."""
    properties = props.decode_properties(row["properties"])
    topic = properties.get(props.REAL_TOPIC)
    queue_id = properties.get(props.REAL_QUEUE_ID, "")
    if not topic or not queue_id.isdigit():
        raise ValueError(f"scheduled message {row['msg_id']} names no real topic and queue")
    message = StandardMessage.from_stored(row)
    return topic, int(queue_id), message.with_properties({props.DELAY_TIME_LEVEL: None})
