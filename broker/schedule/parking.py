"""Where a message sent to a queue is stored first: the one decision every send path takes (the
4.x SEND_MESSAGE and the 5.x SendMessage, whose DELAY messages carry TIMER_DELIVER_MS).

A message with a delay level (DELAY > 0) is parked in SCHEDULE_TOPIC_XXXX (delay_levels.py) and
loses its timer properties, as in Apache RocketMQ 5; a timer message due later than now is parked
in the timer topic (timers.py); anything else is stored in the queue it was sent to. The send is
answered with that queue either way. A broker of flavor=apache has no timer messages: Apache
RocketMQ 4.9 knows none of their properties and stores such a message at once, properties and all,
and so does it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from broker.schedule import timers
from broker.schedule.delay_levels import DelayLevels
from broker.store.writer.append_requests import StandardMessage
from rocketspark.message.validation import delay_level_of


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a message is stored, as what, and whether it is parked there (until due)."""

    topic: str
    queue_id: int
    message: StandardMessage
    parked: bool


class Parking:
    def __init__(self, levels: DelayLevels, *, timer_max_delay_s: int | None) -> None:
        """`timer_max_delay_s`: how far ahead a timer message may be due; None: no timer messages."""
        self.levels = levels
        self._timer_max_delay_s = timer_max_delay_s

    @property
    def timers(self) -> bool:
        """Whether timer messages are parked (not on flavor=apache)."""
        return self._timer_max_delay_s is not None

    def is_timer_message(self, properties: Mapping[str, str]) -> bool:
        """Whether this broker parks the message by its timer properties, if it is due later."""
        return self.timers and delay_level_of(properties) == 0 and timers.is_timer_message(properties)

    def check(self, properties: Mapping[str, str]) -> None:
        """Refuse (ValidationError, MESSAGE_ILLEGAL) timer properties that are not a time, or too far ahead."""
        if self.is_timer_message(properties):
            assert self._timer_max_delay_s is not None
            timers.due_time(properties, int(time.time() * 1000), self._timer_max_delay_s)

    def destination(
        self, topic: str, queue_id: int, message: StandardMessage, properties: Mapping[str, str]
    ) -> Destination:
        """Where a message for `topic`/`queue_id` with these (decoded) properties is stored.

        Raises ValidationError (MESSAGE_ILLEGAL) as :meth:`check`."""
        level = delay_level_of(properties)
        if level > 0:
            if self.timers and any(key in properties for key in timers.REQUEST_KEYS):
                message = timers.without_timer(message)
            return Destination(*self.levels.schedule(topic, queue_id, message, level), parked=True)
        if self.is_timer_message(properties):
            assert self._timer_max_delay_s is not None
            now = int(time.time() * 1000)
            due = timers.due_time(properties, now, self._timer_max_delay_s)
            if due is not None and due > now:
                return Destination(*timers.park(topic, queue_id, message, due), parked=True)
        return Destination(topic, queue_id, message, parked=False)
