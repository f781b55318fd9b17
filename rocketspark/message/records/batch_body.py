"""The body of SEND_BATCH_MESSAGE (request code 320): several messages of one topic in one request.

Each message is encoded as (big-endian, reference §4.5)::

    totalSize i32 | magic i32 (0) | bodyCRC i32 (0) | flag i32 | bodyLen i32 | body | propLen i16 | props

and the body is their concatenation. Producers leave magic and CRC at 0; the broker ignores them,
computes the CRC itself and applies the request header's topic, queue, sys flag and born time to
every message, so only the flag, body and properties of each message travel here.

Both directions work on columns (:class:`BatchColumns`): the encoder fills the fixed-width fields of
every message with one numpy structured array and joins them with the bodies and properties with
pyarrow's `binary_join_element_wise`; the decoder finds where each message starts by following the
totalSize fields (the one step per message: the body has no marker to find them by), then checks
and reads every other field with numpy gathers and cuts bodies and properties out as Arrow arrays.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketspark.errors import DecodeError
from rocketspark.message.batches.arrays import binary_from_ranges, fixed_width, offsets_and_buffer
from rocketspark.message.properties import codec as props
from rocketspark.message.records.decoding import read_big_endian
from rocketspark.message.records.layout import BE_I16, BE_I32

_HEAD = np.dtype(
    [("total_size", ">i4"), ("magic", ">i4"), ("body_crc", ">i4"), ("flag", ">i4"), ("body_length", ">i4")]
)
_FLAG_AT = 12
_BODY_LENGTH_AT = 16
_FIXED = _HEAD.itemsize + BE_I16.itemsize  # the smallest message: empty body and properties
_TOTAL_SIZE = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class BatchColumns:
    """The messages of a batch: the user flag, body and encoded properties string of each."""

    flags: np.ndarray  # int32
    bodies: pa.BinaryArray
    properties: pa.StringArray

    @classmethod
    def of(cls, messages: list[tuple[int, bytes, str]]) -> BatchColumns:
        """(flag, body, encoded properties) messages as columns."""
        flags, bodies, properties = zip(*messages, strict=True) if messages else ((), (), ())
        return cls(np.array(flags, dtype=np.int32), pa.array(bodies, pa.binary()), pa.array(properties, pa.string()))

    def __len__(self) -> int:
        return len(self.bodies)

    def slice(self, start: int, end: int) -> BatchColumns:
        return BatchColumns(self.flags[start:end], self.bodies[start:end], self.properties[start:end])

    def rows(self) -> list[tuple[int, bytes, str]]:
        """(flag, body, encoded properties) of each message."""
        return list(zip(self.flags.tolist(), self.bodies.to_pylist(), self.properties.to_pylist(), strict=True))

    def sizes(self) -> np.ndarray:
        """The bytes each message takes in a batch body (int64)."""
        sizes: np.ndarray = _FIXED + _lengths(self.bodies) + _lengths(self.properties)
        return sizes


class BatchDecodeError(DecodeError):
    """The bytes are not a well-formed SEND_BATCH_MESSAGE body."""


def _lengths(column: pa.Array) -> np.ndarray:
    return np.diff(offsets_and_buffer(column)[0])


def encode_batch_body(batch: BatchColumns) -> bytes:
    """The batch body of the messages, as Java's `MessageDecoder.encodeMessages`.

    ValueError for a null body or properties too long for a record's short length field."""
    n = len(batch)
    if n == 0:
        return b""
    if batch.bodies.null_count:
        raise ValueError("a message of the batch has a null body")
    properties = pc.fill_null(batch.properties, "").cast(pa.binary())
    body_lengths, properties_lengths = _lengths(batch.bodies), _lengths(properties)
    too_long = np.flatnonzero(properties_lengths > props.MAX_PROPERTIES_LENGTH)
    if len(too_long):
        length = int(properties_lengths[too_long[0]])
        raise ValueError(f"properties of {length} bytes exceed {props.MAX_PROPERTIES_LENGTH}")
    head = np.zeros(n, dtype=_HEAD)
    head["total_size"] = _FIXED + body_lengths + properties_lengths
    head["flag"] = batch.flags
    head["body_length"] = body_lengths
    parts = [
        fixed_width(head),
        batch.bodies.cast(pa.large_binary()),
        fixed_width(properties_lengths.astype(BE_I16)),
        properties.cast(pa.large_binary()),
    ]
    joined = pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.large_binary()))
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int64, count=n + 1, offset=joined.offset * 8)
    return joined.buffers()[2][int(offsets[0]) : int(offsets[-1])].to_pybytes()  # type: ignore[no-any-return]


def _starts(data: bytes | memoryview) -> np.ndarray:
    """Where each message starts, following totalSize from byte 0; each must fit what is left."""
    size = len(data)
    unpack = _TOTAL_SIZE.unpack_from
    starts: list[int] = []
    position = 0
    while position < size:
        where = f"message {len(starts)} at byte {position}"
        if size - position < _FIXED:
            raise BatchDecodeError(f"truncated: {where} has {size - position} bytes, less than {_FIXED}")
        (total,) = unpack(data, position)
        if total < _FIXED or total > size - position:
            raise BatchDecodeError(f"{where}: totalSize {total} is outside {_FIXED}..{size - position}")
        starts.append(position)
        position += total
    return np.array(starts, dtype=np.int64)


def _first(bad: np.ndarray) -> int | None:
    rows = np.flatnonzero(bad)
    return int(rows[0]) if len(rows) else None


def decode_batch_body(data: bytes | memoryview) -> BatchColumns:
    """The messages of a batch body; BatchDecodeError if any length field disagrees with the bytes
    or properties are not UTF-8."""
    buffer = pa.py_buffer(data)
    raw = np.frombuffer(buffer, dtype=np.uint8)
    starts = _starts(data)
    if not len(starts):
        return BatchColumns.of([])
    totals = read_big_endian(raw, starts, BE_I32)
    body_lengths = read_big_endian(raw, starts + _BODY_LENGTH_AT, BE_I32)
    row = _first((body_lengths < 0) | (body_lengths > totals - _FIXED))
    if row is not None:
        raise BatchDecodeError(
            f"message {row} at byte {int(starts[row])}: body length {int(body_lengths[row])} "
            f"overruns totalSize {int(totals[row])}"
        )
    body_at = starts + _HEAD.itemsize
    properties_lengths = read_big_endian(raw, body_at + body_lengths, BE_I16)
    row = _first((properties_lengths < 0) | (_FIXED + body_lengths + properties_lengths != totals))
    if row is not None:
        raise BatchDecodeError(
            f"message {row} at byte {int(starts[row])}: totalSize {int(totals[row])} disagrees with body length "
            f"{int(body_lengths[row])} and properties length {int(properties_lengths[row])}"
        )
    properties_at = body_at + body_lengths + BE_I16.itemsize
    properties = binary_from_ranges(buffer, properties_at, properties_at + properties_lengths, pa.string())
    try:
        properties.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise BatchDecodeError(f"properties are not UTF-8: {exc}") from None
    return BatchColumns(
        read_big_endian(raw, starts + _FLAG_AT, BE_I32).astype(np.int32),
        binary_from_ranges(buffer, body_at, body_at + body_lengths, pa.binary()),
        properties,
    )
