"""RocketMQ's rules for topic and group names and message bodies, with specific errors.

The same checks run in clients (before anything is sent) and in the broker (whose answer carries
the error's response code).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping

from rocketspark.errors import ValidationError
from rocketspark.message.properties import codec as props
from rocketspark.protocol.codes import ResponseCode

NAME_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")  # use fullmatch: `$` also matches before a final newline
TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255

AUTO_CREATE_TOPIC_KEY = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: timer messages wait here until due (Apache RocketMQ 5's TimerMessageStore.TIMER_TOPIC)
TIMER_TOPIC = "rmq_sys_wheel_timer"
#: transactions (broker/transaction/): half messages, their end records, halves no producer resolved
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"

#: topics clients may not send to (Java's `TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET`, and the timer
#: topic: what is stored there is delivered to the topic its REAL_TOPIC names)
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TIMER_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)
SYSTEM_TOPICS = NOT_ALLOWED_SEND_TOPICS | {AUTO_CREATE_TOPIC_KEY, "RMQ_SYS_TRACE_TOPIC", "BenchmarkTest"}

RESERVED_GROUPS = frozenset(
    {
        "DEFAULT_PRODUCER",
        "DEFAULT_CONSUMER",
        "CLIENT_INNER_PRODUCER",
        "TOOLS_CONSUMER",
        "FILTERSRV_CONSUMER",
        "__MONITOR_CONSUMER",
        "SELF_TEST_P_GROUP",
        "SELF_TEST_C_GROUP",
        "CID_ONSAPI_PERMISSION_GROUP",
        "CID_ONSAPI_OWNER_GROUP",
        "CID_ONSAPI_PULL_GROUP",
        "CID_RMQ_SYS_TRANS",
    }
)


def _check_name(kind: str, name: str, max_length: int) -> None:
    if not name or not name.strip():
        raise ValidationError(f"the {kind} name is empty", code=ResponseCode.INVALID_PARAMETER)
    if len(name) > max_length:
        raise ValidationError(
            f"the {kind} name {name[:40]!r}... is {len(name)} characters long; at most {max_length} are allowed",
            code=ResponseCode.INVALID_PARAMETER,
        )
    if not NAME_PATTERN.fullmatch(name):
        raise ValidationError(
            f"the {kind} name {name!r} contains characters other than letters, digits, %, |, _ and -",
            code=ResponseCode.INVALID_PARAMETER,
        )


@functools.lru_cache(maxsize=4096)  # invalid names raise, and exceptions are not cached
def validate_topic(topic: str) -> None:
    _check_name("topic", topic, TOPIC_MAX_LENGTH)


@functools.lru_cache(maxsize=4096)
def validate_send_topic(topic: str) -> None:
    validate_topic(topic)
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise ValidationError(f"sending to the system topic {topic} is not allowed", code=ResponseCode.NO_PERMISSION)


def is_system_topic(topic: str) -> bool:
    """System, retry and dead-letter topics: never part of a user's topic pattern."""
    return (
        topic in SYSTEM_TOPICS
        or topic.lower().startswith(SYSTEM_TOPIC_PREFIX)
        or topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))
    )


def validate_group(group: str) -> None:
    _check_name("group", group, GROUP_MAX_LENGTH)


def validate_client_group(group: str) -> None:
    """Clients may not start under a group name RocketMQ reserves for itself."""
    validate_group(group)
    if group in RESERVED_GROUPS:
        raise ValidationError(f"the group name {group} is reserved by RocketMQ; choose another", code=None)


def validate_body(body: bytes, max_size: int) -> None:
    if not body:
        raise ValidationError("the message body is empty", code=ResponseCode.MESSAGE_ILLEGAL)
    if len(body) > max_size:
        raise ValidationError(
            f"the message body is {len(body):,} bytes; the limit is {max_size:,} bytes (maxMessageSize)",
            code=ResponseCode.MESSAGE_ILLEGAL,
        )


def validate_properties_length(length: int, *, message: int | None = None) -> None:
    """A stored record holds a message's encoded properties (TAGS, KEYS, UNIQ_KEY and user ones) in a short."""
    if length > props.MAX_PROPERTIES_LENGTH:
        which = "the message" if message is None else f"message {message}"
        raise ValidationError(
            f"the properties of {which} take {length} bytes (TAGS, KEYS, UNIQ_KEY and user properties "
            f"together); a record holds at most {props.MAX_PROPERTIES_LENGTH:,} bytes",
            code=ResponseCode.MESSAGE_ILLEGAL,
        )


def validate_encoded_properties(encoded: str) -> None:
    """Properties as a standard send carries them: encodable as UTF-8 and short enough for a record."""
    try:
        length = len(encoded.encode())
    except UnicodeEncodeError as exc:
        raise ValidationError(
            f"the message properties are not valid UTF-8 text ({exc.reason} at character {exc.start})",
            code=ResponseCode.MESSAGE_ILLEGAL,
        ) from None
    validate_properties_length(length)


def validate_user_property_keys(keys: Iterable[str]) -> None:
    """User properties may not set what the system sets (KEYS, TAGS, DELAY, UNIQ_KEY, ...)."""
    reserved = props.SYSTEM_KEYS.intersection(keys)
    if reserved:
        raise ValidationError(
            f"user properties may not use the system keys {sorted(reserved)}; "
            "tags, keys and uniq_key have columns of their own",
            code=ResponseCode.MESSAGE_ILLEGAL,
        )


def validate_stored_int(name: str, value: int, bits: int) -> None:
    """A header number the stored record keeps in a signed `bits`-bit field."""
    limit = 1 << (bits - 1)
    if not -limit <= value < limit:
        raise ValidationError(
            f"the send header's {name} = {value} does not fit the {bits}-bit field a record stores it in",
            code=ResponseCode.MESSAGE_ILLEGAL,
        )


def delay_level_of(properties: Mapping[str, str]) -> int:
    """The message's delay level (the DELAY property; 0: not delayed, and so are negative levels, as in Java)."""
    text = (properties.get(props.DELAY_TIME_LEVEL) or "0").strip()
    if not text.lstrip("-").isdigit():
        raise ValidationError(
            f"the DELAY property must be a delay level (an integer), got {text[:40]!r}",
            code=ResponseCode.MESSAGE_ILLEGAL,
        )
    return max(0, int(text))


#: a retry's delay level when none was asked for: this plus the times the message was consumed before
FIRST_RETRY_DELAY_LEVEL = 3
#: a consumer group's retries before a message goes to its dead-letter topic (Java's default)
DEFAULT_MAX_RECONSUME_TIMES = 16


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def group_of_retry_topic(topic: str) -> str | None:
    """The consumer group a %RETRY% topic belongs to; None for other topics."""
    return topic[len(RETRY_GROUP_TOPIC_PREFIX) :] if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else None
