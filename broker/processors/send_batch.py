"""A standard batch send (SEND_BATCH_MESSAGE, or a send with batch=true) taken apart as columns.

The batch body is decoded into columns (:func:`rocketspark.message.records.batch_body.decode_batch_body`),
its properties are read with the column parsers of :mod:`rocketspark.message.properties.columns`,
and every check a standard send gets (:func:`broker.processors.send.check_message`, and that a
batch holds no delayed or transactional message) runs over the whole batch at once. The result is
the producer batch the store keeps for an Arrow send, with the properties exactly as sent and each
message's flag beside it: no Python object per message.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketspark.errors import ValidationError
from rocketspark.message import sysflag
from rocketspark.message.batches.arrays import offsets_and_buffer
from rocketspark.message.batches.schema import PRODUCER_SCHEMA
from rocketspark.message.properties import codec as props
from rocketspark.message.properties.columns import property_values
from rocketspark.message.records.batch_body import BatchColumns, BatchDecodeError, decode_batch_body
from rocketspark.message.validation import delay_level_of, validate_body
from rocketspark.protocol.codes import ResponseCode

BATCH_REFUSAL = (
    "a batch may not hold delayed (DELAY), timer (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS) or "
    "transactional (TRAN_MSG) messages; send them one by one"
)
_NAMES = (
    props.TAGS,
    props.KEYS,
    props.UNIQ_KEY,
    props.WAIT_STORE_MSG_OK,
    props.DELAY_TIME_LEVEL,
    props.TRANSACTION_PREPARED,
    props.TIMER_DELIVER_MS,
    props.TIMER_DELAY_SEC,
    props.TIMER_DELAY_MS,
    props.TIMER_OUT_MS,
    props.SCHEDULE_ORIGIN,
)


class StandardBatch(NamedTuple):
    """A checked standard batch send."""

    columns: BatchColumns
    batch: pa.RecordBatch  # PRODUCER_SCHEMA; user properties null: `columns.properties` holds them all
    wait_store_ok: bool  # no message says WAIT=false
    forwarded: bool  # a message carries SCHEDULE_ORIGIN (a consumed delivery sent on), which the broker drops


def _illegal(reason: str) -> ValidationError:
    return ValidationError(reason, code=ResponseCode.MESSAGE_ILLEGAL)


def _present(column: pa.Array) -> bool:
    return bool(column.null_count < len(column))


def _timer_messages(deliver_ms: pa.Array, delay_sec: pa.Array, delay_ms: pa.Array, out_ms: pa.Array) -> bool:
    """Whether some message asks for a delivery time and was never parked (broker/schedule/timers.py)."""
    asks = pc.or_(pc.or_(pc.is_valid(deliver_ms), pc.is_valid(delay_sec)), pc.is_valid(delay_ms))
    return bool(pc.any(pc.and_(asks, pc.is_null(out_ms))).as_py())


def _empty_as_null(column: pa.Array) -> pa.Array:
    """Null where the property is absent or empty (a standard send's `properties.get(name) or None`)."""
    return pc.if_else(pc.equal(column, ""), pa.scalar(None, pa.string()), column)


def _check_bodies(bodies: pa.Array, max_message_size: int) -> None:
    lengths = np.diff(offsets_and_buffer(bodies)[0])
    bad = np.flatnonzero((lengths == 0) | (lengths > max_message_size))
    if len(bad):
        validate_body(bodies[int(bad[0])].as_py(), max_message_size)


def read_standard_batch(body: bytes, *, max_message_size: int, sys_flag: int, timers: bool) -> StandardBatch:
    """The messages of a batch body, checked completely before the batch joins a group commit round.

    ValidationError (MESSAGE_ILLEGAL) for a malformed body, an empty batch, a bad body, a delayed or
    transactional message, a timer message when the broker has `timers` (else its properties are
    kept as they are, as Apache 4.9 keeps them), or a prepared sys flag."""
    try:
        columns = decode_batch_body(body)
    except BatchDecodeError as exc:
        raise _illegal(f"malformed batch body: {exc}") from None
    if not len(columns):
        raise _illegal("the batch holds no message")
    _check_bodies(columns.bodies, max_message_size)
    tags, keys, uniq_key, wait, delay, half, deliver_ms, delay_sec, delay_ms, out_ms, origin = property_values(
        columns.properties, *_NAMES
    )
    if timers and _timer_messages(deliver_ms, delay_sec, delay_ms, out_ms):
        raise _illegal(BATCH_REFUSAL)
    for text in pc.unique(pc.drop_null(delay)).to_pylist():
        if delay_level_of({props.DELAY_TIME_LEVEL: text}):
            raise _illegal(BATCH_REFUSAL)
    halves = pc.fill_null(pc.equal(pc.utf8_lower(half), "true"), False)
    if sysflag.transaction_type(sys_flag) == sysflag.TRANSACTION_PREPARED_TYPE and not halves[0].as_py():
        raise _illegal("a prepared (transactional) message must carry the property TRAN_MSG=true")
    if pc.any(halves).as_py():
        raise _illegal(BATCH_REFUSAL)
    n = len(columns)
    batch = pa.RecordBatch.from_arrays(
        [
            columns.bodies,
            _empty_as_null(tags),
            _empty_as_null(keys),
            _empty_as_null(uniq_key),
            pa.nulls(n, PRODUCER_SCHEMA.field("properties").type),
        ],
        schema=PRODUCER_SCHEMA,
    )
    wait_store_ok = not pc.any(pc.equal(wait, "false")).as_py()
    return StandardBatch(columns, batch, wait_store_ok, _present(origin))
