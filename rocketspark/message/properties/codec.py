"""Message properties: RocketMQ's `key 0x01 value 0x02` string form and the well-known keys."""

from __future__ import annotations

from collections.abc import Mapping

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "  # between several KEYS of one message
MAX_PROPERTIES_LENGTH = 32767  # the stored record holds it in a short

# MessageConst keys (Apache RocketMQ)
KEYS = "KEYS"
TAGS = "TAGS"
UNIQ_KEY = "UNIQ_KEY"
WAIT_STORE_MSG_OK = "WAIT"
DELAY_TIME_LEVEL = "DELAY"
RETRY_TOPIC = "RETRY_TOPIC"
REAL_TOPIC = "REAL_TOPIC"
REAL_QUEUE_ID = "REAL_QID"
TRANSACTION_PREPARED = "TRAN_MSG"
PRODUCER_GROUP = "PGROUP"
TRANSACTION_ID = "__transactionId__"
TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
#: seconds after its birth before a half message is checked (the producer's; not a system key: Java's
#: producers set it as a user property)
CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
MIN_OFFSET = "MIN_OFFSET"
MAX_OFFSET = "MAX_OFFSET"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUME_TIME = "RECONSUME_TIME"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
SHARDING_KEY = "__SHARDINGKEY"
MSG_REGION = "MSG_REGION"
TRACE_SWITCH = "TRACE_ON"
#: RocketMQ 5's timer messages: delivered at an epoch time in ms, or after seconds or ms from the send
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
#: set by the broker on a parked timer message: the epoch ms it is due (a message carrying it is never parked again)
TIMER_OUT_MS = "TIMER_OUT_MS"
#: set by the broker: how often a parked timer message was written again while it waited
TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
#: the bundled broker's mark on a parked message it delivered: `<level>:<offset>` in SCHEDULE_TOPIC_XXXX,
#: `timer:<offset>` in the timer topic; its services count these at start-up, so the broker never takes
#: it from a client
SCHEDULE_ORIGIN = "SCHEDULE_ORIGIN"

#: Keys the system sets; user properties must not use them.
SYSTEM_KEYS = frozenset(
    {
        KEYS,
        TAGS,
        UNIQ_KEY,
        WAIT_STORE_MSG_OK,
        DELAY_TIME_LEVEL,
        RETRY_TOPIC,
        REAL_TOPIC,
        REAL_QUEUE_ID,
        TRANSACTION_PREPARED,
        PRODUCER_GROUP,
        TRANSACTION_ID,
        TRANSACTION_PREPARED_QUEUE_OFFSET,
        TRANSACTION_CHECK_TIMES,
        MIN_OFFSET,
        MAX_OFFSET,
        ORIGIN_MESSAGE_ID,
        RECONSUME_TIME,
        MAX_RECONSUME_TIMES,
        MSG_REGION,
        TRACE_SWITCH,
        TIMER_DELAY_SEC,
        TIMER_DELIVER_MS,
        TIMER_DELAY_MS,
        TIMER_OUT_MS,
        TIMER_ROLL_TIMES,
        SCHEDULE_ORIGIN,
    }
)


def encode_properties(properties: Mapping[str, str]) -> str:
    """`k1\\x01v1\\x02k2\\x01v2\\x02`; every pair, the last included, ends with 0x02."""
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in properties.items())


def decode_properties(text: str) -> dict[str, str]:
    """Inverse of :func:`encode_properties`; tolerates a missing final separator, as Java does."""
    result: dict[str, str] = {}
    for pair in text.split(PROPERTY_SEPARATOR):
        if not pair:
            continue
        key, sep, value = pair.partition(NAME_VALUE_SEPARATOR)
        if sep:
            result[key] = value
    return result
