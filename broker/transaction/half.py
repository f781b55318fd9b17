"""The messages of a transaction, as Apache RocketMQ 4.x stores them.

* A half message (a send whose TRAN_MSG property is "true") is stored in queue 0 of
  RMQ_SYS_TRANS_HALF_TOPIC with its real topic and queue in REAL_TOPIC and REAL_QID, its UNIQ_KEY
  as `__transactionId__` and its sysflag's transaction type cleared.
* Its commit is the same message stored in the real queue with a COMMIT sysflag, without REAL_* and
  TRAN_MSG, carrying TRAN_PREPARED_QUEUE_OFFSET: the half message's queue offset. That property is
  how the broker recognises, after a crash, a commit whose end record was not written.
* An end record (an "op") in queue 0 of RMQ_SYS_TRANS_OP_HALF_TOPIC: the half message's queue
  offset as its body (beyond Apache, the offsets a range end ended, as runs: `12-40,45`), tag "d"
  (Apache's remove tag) and, beyond Apache, how it ended in TRAN_END: commit, rollback or discard
  (moved to TRANS_CHECK_MAX_TIME_TOPIC after the last check).
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Mapping, Sequence
from typing import Any

from broker.store.writer.append_requests import StandardMessage
from broker.transaction.range_end import decode_runs, encode_runs
from rocketspark.errors import ValidationError
from rocketspark.message import sysflag
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, validate_encoded_properties
from rocketspark.protocol.codes import ResponseCode

#: on an end record: how the half message ended
END_KIND = "TRAN_END"
#: Apache's tag of an end record
REMOVE_TAG = "d"


class EndKind(enum.Enum):
    COMMIT = "commit"
    ROLLBACK = "rollback"
    DISCARD = "discard"  # checked transactionCheckMax times unanswered; an END may still commit it


def is_half(properties: Mapping[str, str]) -> bool:
    return properties.get(props.TRANSACTION_PREPARED, "").lower() == "true"


def half_message(topic: str, queue_id: int, message: StandardMessage) -> tuple[str, int, StandardMessage]:
    """Where and as what a half message for `topic`/`queue_id` is stored."""
    properties = props.decode_properties(message.properties)
    if not properties.get(props.PRODUCER_GROUP):
        raise ValidationError(
            "a transactional (TRAN_MSG) message must name its producer group in the PGROUP property",
            code=ResponseCode.MESSAGE_ILLEGAL,
        )
    if properties.get(props.DELAY_TIME_LEVEL, "0") not in ("", "0"):
        raise ValidationError(
            "a transactional (TRAN_MSG) message may not be delayed (DELAY)", code=ResponseCode.MESSAGE_ILLEGAL
        )
    properties.update({props.REAL_TOPIC: topic, props.REAL_QUEUE_ID: str(queue_id)})
    if message.uniq_key:
        properties[props.TRANSACTION_ID] = message.uniq_key
    encoded = props.encode_properties(properties)
    validate_encoded_properties(encoded)
    flag = message.sys_flag & ~sysflag.TRANSACTION_TYPE_MASK
    return TRANS_HALF_TOPIC, 0, dataclasses.replace(message, properties=encoded, sys_flag=flag)


def immunity_seconds(properties: Mapping[str, str]) -> int | None:
    """CHECK_IMMUNITY_TIME_IN_SECONDS as Apache's getImmunityTime reads it (-1 for a value that is
    not a number: `transactionTimeOut`); None without the property."""
    seconds = properties.get(props.CHECK_IMMUNITY_TIME_IN_SECONDS)
    if seconds is None:
        return None
    try:
        return int(seconds)
    except ValueError:
        return -1


def immunity_ms(properties: Mapping[str, str], timeout_ms: int) -> int | None:
    """How long after its birth a half message is not checked (CHECK_IMMUNITY_TIME_IN_SECONDS; -1 or
    a value that is not a number: `timeout_ms`, as Apache's getImmunityTime); None without the property."""
    value = immunity_seconds(properties)
    if value is None:
        return None
    return timeout_ms if value == -1 else value * 1000


def real_queue(row: Mapping[str, Any]) -> tuple[str, int, dict[str, str]]:
    """The real topic and queue of a stored half message (STORED_SCHEMA row), and its properties."""
    properties = props.decode_properties(row["properties"])
    topic = properties.get(props.REAL_TOPIC)
    queue_id = properties.get(props.REAL_QUEUE_ID, "")
    if not topic or not queue_id.isdigit():
        raise ValueError(f"half message at offset {row['queue_offset']} names no real topic and queue")
    return topic, int(queue_id), properties


def committed_message(row: Mapping[str, Any]) -> tuple[str, int, StandardMessage]:
    """The real topic, queue and message that commit the stored half message `row`."""
    topic, queue_id, _ = real_queue(row)
    message = StandardMessage.from_stored(row).with_properties(
        {
            props.REAL_TOPIC: None,
            props.REAL_QUEUE_ID: None,
            props.TRANSACTION_PREPARED: None,
            props.TRANSACTION_PREPARED_QUEUE_OFFSET: str(row["queue_offset"]),
        }
    )
    flag = (message.sys_flag & ~sysflag.TRANSACTION_TYPE_MASK) | sysflag.TRANSACTION_COMMIT_TYPE
    return topic, queue_id, dataclasses.replace(message, sys_flag=flag, wait_store_ok=True)


def discarded_message(row: Mapping[str, Any], checks: int) -> tuple[str, int, StandardMessage]:
    """The copy of a half message no producer resolved in `checks` checks, for TRANS_CHECK_MAX_TIME_TOPIC."""
    message = StandardMessage.from_stored(row).with_properties({props.TRANSACTION_CHECK_TIMES: str(checks)})
    return TRANS_CHECK_MAX_TIME_TOPIC, 0, message


def end_record(half_offsets: int | Sequence[int], kind: EndKind, broker_host: str) -> StandardMessage:
    """The RMQ_SYS_TRANS_OP_HALF_TOPIC record that ends the half message at `half_offsets` (one, as
    Apache's, or ascending ones of a range end: their runs, range_end.py), born at the broker
    (`ip:port`)."""
    encoded = props.encode_properties({props.TAGS: REMOVE_TAG, END_KIND: kind.value, props.WAIT_STORE_MSG_OK: "true"})
    body = str(half_offsets) if isinstance(half_offsets, int) else encode_runs(half_offsets)
    return StandardMessage(
        body=body.encode(),
        properties=encoded,
        tags=REMOVE_TAG,
        born_timestamp=int(time.time() * 1000),
        born_host=broker_host,
    )


def ended(row: Mapping[str, Any]) -> tuple[list[int], EndKind] | None:
    """(half offsets, kind) of a stored end record, None if the row is not one."""
    offsets = decode_runs(bytes(row["body"]).decode("ascii", errors="replace"))
    if not offsets:
        return None
    kind = props.decode_properties(row["properties"]).get(END_KIND, "")
    try:
        return offsets, EndKind(kind)
    except ValueError:  # not written by this broker
        return None
