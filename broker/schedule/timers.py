"""Timer messages: RocketMQ 5's arbitrary delivery times, for 4.x and 5.x sends alike.

As Apache RocketMQ 5 (`HookUtils.transformTimerMessage`): a message carrying TIMER_DELAY_SEC,
TIMER_DELAY_MS or TIMER_DELIVER_MS (looked for in that order: seconds or ms from now, or an epoch
time in ms) is due at that time. One due later than now is parked in queue 0 of rmq_sys_wheel_timer
with its real topic and queue in REAL_TOPIC and REAL_QID and its due time in TIMER_OUT_MS (the
consume queue entries of that topic carry it as their tag code: broker/store/queues/dispatch.py);
one due already is stored at once. A message with a delay level (DELAY) waits for its level and
loses its timer properties; one carrying TIMER_OUT_MS (a delivered timer message sent again) is not
a timer message. A due time more than timerMaxDelaySec away is refused (MESSAGE_ILLEGAL).

When due, the timer service (broker/schedule/timer_service.py) stores the message in its real queue
without REAL_TOPIC and REAL_QID, keeping TIMER_OUT_MS, and with SCHEDULE_ORIGIN `timer:<offset>` of
the parked message it comes from; a message that waited long is parked again ("rolled") with
TIMER_ROLL_TIMES raised and the same mark, so retention never deletes it before it is due. By that
mark the service recognises, after a crash, what it stored after its progress was last written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from broker.store.writer.append_requests import StandardMessage
from rocketspark.errors import ValidationError
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import TIMER_TOPIC
from rocketspark.protocol.codes import ResponseCode

#: the properties that ask for a delivery time, in the order Apache reads them
REQUEST_KEYS = (props.TIMER_DELAY_SEC, props.TIMER_DELAY_MS, props.TIMER_DELIVER_MS)
_INTEGER = re.compile(r"-?[0-9]{1,18}")
_ORIGIN_PREFIX = "timer:"
_ORIGIN_PATTERN = (
    f"(?:^|{props.PROPERTY_SEPARATOR}){props.SCHEDULE_ORIGIN}{props.NAME_VALUE_SEPARATOR}"
    f"{_ORIGIN_PREFIX}(?P<offset>[0-9]+)"
)


def is_timer_message(properties: Mapping[str, str]) -> bool:
    """Whether the message asks for a delivery time (and was not parked before)."""
    return props.TIMER_OUT_MS not in properties and any(key in properties for key in REQUEST_KEYS)


def due_time(properties: Mapping[str, str], now_ms: int, max_delay_s: int) -> int | None:
    """The epoch ms a message is due, None for one that is not a timer message.

    Raises ValidationError (MESSAGE_ILLEGAL) for a value that is not an integer, or a time more
    than `max_delay_s` away."""
    if not is_timer_message(properties):
        return None
    key = next(k for k in REQUEST_KEYS if k in properties)
    text = properties[key].strip()
    if not _INTEGER.fullmatch(text):
        unit = "an epoch time in ms" if key == props.TIMER_DELIVER_MS else "a whole number"
        raise ValidationError(
            f"the {key} property must be {unit}, got {text[:40]!r}", code=ResponseCode.MESSAGE_ILLEGAL
        )
    value = int(text)
    due = value if key == props.TIMER_DELIVER_MS else now_ms + value * (1000 if key == props.TIMER_DELAY_SEC else 1)
    if due - now_ms > max_delay_s * 1000:
        raise ValidationError(
            f"the message is due in {(due - now_ms) / 1000:,.0f} s ({key}); this broker keeps timer messages "
            f"for at most {max_delay_s:,} s (broker.conf timerMaxDelaySec)",
            code=ResponseCode.MESSAGE_ILLEGAL,
        )
    return due


def without_timer(message: StandardMessage) -> StandardMessage:
    """The message without the properties that ask for a delivery time (a delay level wins)."""
    return message.with_properties(dict.fromkeys(REQUEST_KEYS))


def park(topic: str, queue_id: int, message: StandardMessage, due_ms: int) -> tuple[str, int, StandardMessage]:
    """Where a message for `topic`/`queue_id` due at `due_ms` waits, and as what."""
    parked = message.with_properties(
        {
            props.TIMER_OUT_MS: str(due_ms),
            props.REAL_TOPIC: topic,
            props.REAL_QUEUE_ID: str(queue_id),
            props.SCHEDULE_ORIGIN: None,
        }
    )
    return TIMER_TOPIC, 0, parked


def origin(parked_offset: int) -> str:
    return f"{_ORIGIN_PREFIX}{parked_offset}"


def due_message(row: Mapping[str, Any]) -> tuple[str, int, StandardMessage]:
    """The real topic, queue and message of a parked message (a STORED_SCHEMA row of the timer topic)."""
    properties = props.decode_properties(row["properties"])
    topic = properties.get(props.REAL_TOPIC)
    queue_id = properties.get(props.REAL_QUEUE_ID, "")
    if not topic or not queue_id.isdigit():
        raise ValueError(f"timer message {row['msg_id']} names no real topic and queue")
    message = StandardMessage.from_stored(row).with_properties(
        {props.REAL_TOPIC: None, props.REAL_QUEUE_ID: None, props.SCHEDULE_ORIGIN: origin(row["queue_offset"])}
    )
    return topic, int(queue_id), message


def rolled_message(row: Mapping[str, Any]) -> StandardMessage:
    """A parked message (STORED_SCHEMA row of the timer topic) to park again, due at the same time."""
    times = props.decode_properties(row["properties"]).get(props.TIMER_ROLL_TIMES, "0")
    count = int(times) + 1 if times.isdigit() else 1
    return StandardMessage.from_stored(row).with_properties(
        {props.TIMER_ROLL_TIMES: str(count), props.SCHEDULE_ORIGIN: origin(row["queue_offset"])}
    )


def stored_origins(batch: pa.RecordBatch) -> list[int]:
    """The parked offsets named by the timer marks among stored messages (STORED_SCHEMA)."""
    origins = pc.extract_regex(batch.column("properties"), _ORIGIN_PATTERN)
    found = pc.filter(origins, pc.is_valid(origins))
    return [int(offset) for offset in found.field("offset").to_pylist()]
