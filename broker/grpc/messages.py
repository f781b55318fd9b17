"""Messages between RocketMQ 5's `apache.rocketmq.v2.Message` and what the broker stores.

The store keeps every message as 4.x does (body, flag, sys flag, `k\\x01v\\x02` properties), so 4.x
clients and the Spark source read what 5.x producers send and the reverse. A 5.x message's system
properties map to 4.x properties as Apache's proxy maps them: tag -> TAGS, keys -> KEYS (space
separated), message id -> UNIQ_KEY, message group -> __SHARDINGKEY, delivery timestamp ->
TIMER_DELIVER_MS (epoch ms), a transactional message -> TRAN_MSG and PGROUP (its topic),
orphaned_transaction_recovery_duration -> CHECK_IMMUNITY_TIME_IN_SECONDS. What is received carries
its body uncompressed with an MD5 digest (upper-case hex, which both official clients check).
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from broker.grpc.call import resource_fields
from broker.grpc.status import StatusError
from broker.grpc.v2 import definition_pb2 as pb
from rocketspark.message import sysflag
from rocketspark.message.properties import codec as props
from rocketspark.remoting.throttled_log import escaped

#: the 5.x message's trace context (Apache's MessageConst.PROPERTY_TRACE_CONTEXT)
TRACE_CONTEXT = "TRACE_CONTEXT"
#: properties a received message's user_properties leave out: they are system properties there
_NOT_USER = props.SYSTEM_KEYS | {
    props.SHARDING_KEY,
    props.CHECK_IMMUNITY_TIME_IN_SECONDS,
    TRACE_CONTEXT,
}


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A 5.x message as the broker's send path takes it."""

    body: bytes
    properties: dict[str, str]
    sys_flag: int
    born_timestamp: int  # ms
    message_type: pb.MessageType


def timestamp_ms(value: Timestamp) -> int:
    return value.seconds * 1000 + value.nanos // 1_000_000


def _time_fields(ms: int) -> dict[str, int]:
    """A Timestamp's or Duration's fields."""
    return {"seconds": ms // 1000, "nanos": (ms % 1000) * 1_000_000}


def timestamp(ms: int) -> Timestamp:
    return Timestamp(**_time_fields(ms))


def duration(ms: int) -> Duration:
    return Duration(**_time_fields(ms))


def duration_ms(value: Duration) -> int:
    return value.seconds * 1000 + value.nanos // 1_000_000


def _check_text(code: pb.Code, what: str, value: str) -> None:
    if not value.strip():
        raise StatusError(code, f"the {what} is empty or blank")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        raise StatusError(code, f"the {what} {escaped(value)} contains a control character")


def _body(message: pb.Message, max_body_size: int) -> bytes:
    body = message.body
    if message.system_properties.body_encoding == pb.GZIP:
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error):
            raise StatusError(
                pb.MESSAGE_CORRUPTED, "the body is said to be gzip-encoded but does not decompress"
            ) from None
    if not body:
        raise StatusError(pb.MESSAGE_BODY_EMPTY, "the message body is empty")
    if len(body) > max_body_size:
        raise StatusError(
            pb.MESSAGE_BODY_TOO_LARGE,
            f"the message body is {len(body):,} bytes; the limit is {max_body_size:,} bytes (maxMessageSize)",
        )
    return body


def _user_properties(message: pb.Message) -> dict[str, str]:
    properties: dict[str, str] = {}
    for key, value in message.user_properties.items():
        _check_text(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, "user property key", key)
        if key in _NOT_USER:
            raise StatusError(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"the user property {escaped(key)} is used by RocketMQ")
        if any(ord(char) < 0x20 for char in value):
            raise StatusError(
                pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"the value of user property {escaped(key)} contains a control character",
            )
        properties[key] = value
    return properties


def _check_type(system: pb.SystemProperties) -> None:
    """A message's type and the system properties it needs (or must not have) agree."""
    kind = system.message_type
    has_group = bool(system.message_group)
    has_time = system.HasField("delivery_timestamp")
    if kind == pb.FIFO and not has_group:
        raise StatusError(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a FIFO message needs a message_group")
    if kind == pb.DELAY and not has_time:
        raise StatusError(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a DELAY message needs a delivery_timestamp")
    if kind == pb.TRANSACTION and (has_group or has_time):
        raise StatusError(
            pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "a TRANSACTION message may have neither a message_group nor a delivery_timestamp",
        )
    if kind not in (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION):
        name = pb.MessageType.Name(kind) if kind in pb.MessageType.values() else str(kind)
        raise StatusError(pb.UNSUPPORTED, f"{name} messages are not supported by this broker")


def outgoing(message: pb.Message, topic: str, max_body_size: int) -> Outgoing:
    """A sent message checked (as Apache's proxy checks it) and mapped to the 4.x properties."""
    system = message.system_properties
    body = _body(message, max_body_size)
    if not system.message_id:
        raise StatusError(pb.ILLEGAL_MESSAGE_ID, "the message has no message_id (system_properties.message_id)")
    _check_type(system)
    properties = _user_properties(message)
    if system.HasField("tag"):
        _check_text(pb.ILLEGAL_MESSAGE_TAG, "tag", system.tag)
        if "|" in system.tag:
            raise StatusError(pb.ILLEGAL_MESSAGE_TAG, f"the tag {escaped(system.tag)} contains '|'")
        properties[props.TAGS] = system.tag
    if system.keys:
        for key in system.keys:
            _check_text(pb.ILLEGAL_MESSAGE_KEY, "key", key)
        properties[props.KEYS] = props.KEY_SEPARATOR.join(system.keys)
    properties[props.UNIQ_KEY] = system.message_id
    if system.message_group:
        _check_text(pb.ILLEGAL_MESSAGE_GROUP, "message group", system.message_group)
        properties[props.SHARDING_KEY] = system.message_group
    if system.HasField("delivery_timestamp"):
        properties[props.TIMER_DELIVER_MS] = str(timestamp_ms(system.delivery_timestamp))
    sys_flag = 0
    if system.message_type == pb.TRANSACTION:
        sys_flag |= sysflag.TRANSACTION_PREPARED_TYPE
        properties[props.TRANSACTION_PREPARED] = "true"
        properties[props.PRODUCER_GROUP] = topic  # as Apache's proxy: the check asks the topic's producers
        if system.HasField("orphaned_transaction_recovery_duration"):
            seconds = system.orphaned_transaction_recovery_duration.seconds
            properties[props.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(max(seconds, 0))
    if system.trace_context:
        properties[TRACE_CONTEXT] = system.trace_context
    born = timestamp_ms(system.born_timestamp) if system.HasField("born_timestamp") else 0
    return Outgoing(body, properties, sys_flag, born, system.message_type)


def message_type(properties: Mapping[str, str], sys_flag: int) -> pb.MessageType:
    """What a stored message is to a 5.x consumer."""
    if props.TRANSACTION_PREPARED_QUEUE_OFFSET in properties or (
        sysflag.transaction_type(sys_flag) == sysflag.TRANSACTION_COMMIT_TYPE
    ):
        return pb.TRANSACTION
    if properties.get(props.SHARDING_KEY):
        return pb.FIFO
    if props.TIMER_DELIVER_MS in properties or properties.get(props.DELAY_TIME_LEVEL, "0") not in ("", "0"):
        return pb.DELAY
    return pb.NORMAL


def body_digest(body: bytes) -> pb.Digest:
    return pb.Digest(**_digest_fields(body))


def _digest_fields(body: bytes) -> dict[str, Any]:
    return {"type": pb.MD5, "checksum": hashlib.md5(body, usedforsecurity=False).hexdigest().upper()}


def message_of(row: Mapping[str, Any], **options: Any) -> pb.Message:
    """The 5.x message of a stored message (a STORED_SCHEMA row, as `batch.to_pylist()` gives it),
    with :func:`message_fields`' keyword `options` (`store_host` among them)."""
    return pb.Message(**message_fields(row, **options))


def message_fields(
    row: Mapping[str, Any],
    *,
    store_host: str,
    namespace: str = "",
    topic: str | None = None,
    receipt_handle: str | None = None,
    delivery_attempt: int | None = None,
    invisible_duration_ms: int | None = None,
) -> dict[str, Any]:
    """The fields of a stored message's 5.x message (a STORED_SCHEMA row), without building it: a
    ReceiveMessageResponse built of them makes its message once (about 3 µs here) rather than a
    message copied into it (about 15 µs). `topic`: the name to show instead of the row's (a retry's
    original topic); `store_host`: the broker's address."""
    properties = props.decode_properties(row["properties"])
    body = bytes(row["body"])
    if row["sys_flag"] & sysflag.COMPRESSED:
        body = zlib.decompress(body)
    system: dict[str, Any] = {
        "message_id": properties.get(props.UNIQ_KEY) or str(row["msg_id"]),
        "body_digest": _digest_fields(body),
        "body_encoding": pb.IDENTITY,
        "message_type": message_type(properties, row["sys_flag"]),
        "born_timestamp": _time_fields(row["born_timestamp"]),
        "born_host": str(row["born_host"]).rsplit(":", 1)[0],
        "store_timestamp": _time_fields(row["store_timestamp"]),
        "store_host": store_host,
        "queue_id": row["queue_id"],
        "queue_offset": row["queue_offset"],
    }
    if row["tags"]:
        system["tag"] = row["tags"]
    if row["keys"]:
        system["keys"] = [key for key in str(row["keys"]).split(props.KEY_SEPARATOR) if key]
    group = properties.get(props.SHARDING_KEY)
    if group:
        system["message_group"] = group
    deliver_ms = properties.get(props.TIMER_DELIVER_MS, "")
    if deliver_ms.isdigit():
        system["delivery_timestamp"] = _time_fields(int(deliver_ms))
    if TRACE_CONTEXT in properties:
        system["trace_context"] = properties[TRACE_CONTEXT]
    if receipt_handle is not None:
        system["receipt_handle"] = receipt_handle
    if delivery_attempt is not None:
        system["delivery_attempt"] = delivery_attempt
    if invisible_duration_ms is not None:
        system["invisible_duration"] = _time_fields(invisible_duration_ms)
    fields: dict[str, Any] = {
        "topic": resource_fields(topic or str(row["topic"]), namespace),
        "system_properties": system,
        "body": body,
    }
    user = {key: value for key, value in properties.items() if key not in _NOT_USER}
    if user:  # an empty map is no field on the wire, and filling even one costs a Python-level update()
        fields["user_properties"] = user
    return fields
