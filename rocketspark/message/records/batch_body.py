"""The body of SEND_BATCH_MESSAGE (request code 320): several messages of one topic in one request.

Each message is encoded as (big-endian, reference §4.5)::

    totalSize i32 | magic i32 (0) | bodyCRC i32 (0) | flag i32 | bodyLen i32 | body | propLen i16 | props

and the body is their concatenation. Producers leave magic and CRC at 0; the broker ignores them,
computes the CRC itself and applies the request header's topic, queue, sys flag and born time to
every message, so only the flag, body and properties of each message travel here.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from rocketspark.errors import DecodeError
from rocketspark.message.properties import codec as props

_HEAD = struct.Struct(">iiiii")  # totalSize, magic, bodyCRC, flag, bodyLen
_PROPERTIES_LENGTH = struct.Struct(">h")
_FIXED = _HEAD.size + _PROPERTIES_LENGTH.size


class BatchEntry(NamedTuple):
    """One message of a batch: its user flag, body and encoded properties string."""

    flag: int
    body: bytes
    properties: str


class BatchDecodeError(DecodeError):
    """The bytes are not a well-formed SEND_BATCH_MESSAGE body."""


def encode_batch_body(messages: Sequence[tuple[int, bytes, str]]) -> bytes:
    """The batch body of (flag, body, encoded properties) messages, as Java's `MessageDecoder.encodeMessages`."""
    parts: list[bytes] = []
    for flag, body, properties in messages:
        encoded = properties.encode()
        if len(encoded) > props.MAX_PROPERTIES_LENGTH:
            raise ValueError(f"properties of {len(encoded)} bytes exceed {props.MAX_PROPERTIES_LENGTH}")
        parts += (
            _HEAD.pack(_FIXED + len(body) + len(encoded), 0, 0, flag, len(body)),
            body,
            _PROPERTIES_LENGTH.pack(len(encoded)),
            encoded,
        )
    return b"".join(parts)


def decode_batch_body(data: bytes) -> list[BatchEntry]:
    """The messages of a batch body; BatchDecodeError if any length field disagrees with the bytes."""
    entries: list[BatchEntry] = []
    view = memoryview(data)
    position, size = 0, len(view)
    while position < size:
        where = f"message {len(entries)} at byte {position}"
        if size - position < _FIXED:
            raise BatchDecodeError(f"truncated: {where} has {size - position} bytes, less than {_FIXED}")
        total, _magic, _crc, flag, body_length = _HEAD.unpack_from(view, position)
        if total < _FIXED or total > size - position:
            raise BatchDecodeError(f"{where}: totalSize {total} is outside {_FIXED}..{size - position}")
        if body_length < 0 or body_length > total - _FIXED:
            raise BatchDecodeError(f"{where}: body length {body_length} overruns totalSize {total}")
        body_end = position + _HEAD.size + body_length
        (properties_length,) = _PROPERTIES_LENGTH.unpack_from(view, body_end)
        if properties_length < 0 or _FIXED + body_length + properties_length != total:
            raise BatchDecodeError(
                f"{where}: totalSize {total} disagrees with body length {body_length} "
                f"and properties length {properties_length}"
            )
        properties_start = body_end + _PROPERTIES_LENGTH.size
        try:
            properties = str(view[properties_start : properties_start + properties_length], "utf-8")
        except UnicodeDecodeError as exc:
            raise BatchDecodeError(f"{where}: properties are not UTF-8: {exc}") from None
        entries.append(BatchEntry(flag, view[position + _HEAD.size : body_end].tobytes(), properties))
        position += total
    return entries
