"""The message types users handle: `Message` to send, `MessageExt` received."""

from __future__ import annotations

from dataclasses import dataclass, field

from rocketspark.message.properties import codec as props
from rocketspark.protocol.queue import MessageQueue


def join_keys(keys: str | list[str] | tuple[str, ...] | None) -> str | None:
    if keys is None or isinstance(keys, str):
        return keys or None
    return props.KEY_SEPARATOR.join(keys) or None


@dataclass(slots=True)
class Message:
    """A message to send. `properties` holds user properties; tags, keys and the delivery delay have
    fields of their own. `delay_level` n > 0 delivers the message after the broker's n-th delay
    (messageDelayLevel; Apache's defaults are 1s 5s 10s 30s 1m 2m ... 2h); `deliver_time_ms`
    delivers it at that epoch time in ms (RocketMQ 5's timer messages, the TIMER_DELIVER_MS
    property: the bundled broker and Apache RocketMQ 5 brokers; Apache 4.x brokers ignore it)."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | None = None  # several keys are separated by spaces, as in Java
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    deliver_time_ms: int | None = None

    def all_properties(self) -> dict[str, str]:
        """User properties plus TAGS, KEYS, DELAY and TIMER_DELIVER_MS, as they travel on the wire."""
        result = dict(self.properties)
        if self.tags:
            result[props.TAGS] = self.tags
        if self.keys:
            result[props.KEYS] = self.keys
        if self.delay_level > 0:
            result[props.DELAY_TIME_LEVEL] = str(self.delay_level)
        if self.deliver_time_ms is not None:
            result[props.TIMER_DELIVER_MS] = str(self.deliver_time_ms)
        return result


@dataclass(slots=True)
class MessageExt:
    """A stored message as a consumer receives it. `properties` holds every property, system ones too."""

    topic: str
    body: bytes
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    msg_id: str  # UNIQ_KEY when the producer set one, else the offset msgId (Java's getMsgId)
    offset_msg_id: str
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    flag: int = 0
    sys_flag: int = 0
    body_crc: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    broker_name: str = ""
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def tags(self) -> str | None:
        return self.properties.get(props.TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(props.KEYS)

    @property
    def message_queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)
