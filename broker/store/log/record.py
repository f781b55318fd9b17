"""Framing of one stored batch in a commit log segment.

    uint32 magic   uint32 payload length   uint32 crc32(payload)   uint32 row count
    payload, then zero bytes up to the next multiple of 8

The magic says what the payload is: "RSB1", one Arrow IPC record batch message (STORED_SCHEMA),
or "RSW1", RocketMQ message records as a standard pull returns them (a commit round of standard sends,
see broker/store/log/stored.py). Records start 8-byte aligned, so Arrow reads payloads without
copying. The checksum finds a torn tail after a crash. A message's commit log offset is the
position of its record plus its row: every row takes more than one payload byte, so these offsets
are unique and grow with the log.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from broker.store.log.stored import StoredBatch, WireRecords
from rocketspark.message.batches.schema import STORED_SCHEMA
from rocketspark.message.records.decoding import read_big_endian

BE_U32 = np.dtype(">u4")

MAGIC = 0x52534231  # "RSB1": an Arrow record batch
MAGIC_WIRE = 0x52535731  # "RSW1": message records
HEADER = struct.Struct(">IIII")
HEADER_SIZE = HEADER.size
_ALIGN = 8


@dataclass(frozen=True, slots=True)
class RecordHeader:
    payload_length: int
    crc: int
    rows: int
    wire: bool = False

    @property
    def total_length(self) -> int:
        return HEADER_SIZE + _aligned(self.payload_length)


def _aligned(length: int) -> int:
    return -(-length // _ALIGN) * _ALIGN


def encode(batch: pa.RecordBatch) -> tuple[bytes, pa.Buffer]:
    """The header and payload of `batch` (written together, kept apart to avoid a copy)."""
    payload = batch.serialize()
    header = HEADER.pack(MAGIC, payload.size, zlib.crc32(payload), batch.num_rows)
    return header, payload


def encode_wire(records: bytes, rows: int) -> tuple[bytes, bytes]:
    """The header and the padded payload of `rows` message records."""
    header = HEADER.pack(MAGIC_WIRE, len(records), zlib.crc32(records), rows)
    return header, records + bytes(_aligned(len(records)) - len(records))


def parse_header(data: bytes | memoryview) -> RecordHeader | None:
    """The header at the start of `data`, or None if these bytes are not a record header."""
    if len(data) < HEADER_SIZE:
        return None
    magic, length, crc, rows = HEADER.unpack_from(data, 0)
    if magic not in (MAGIC, MAGIC_WIRE) or rows == 0 or length < rows or (magic == MAGIC and length % _ALIGN):
        return None
    return RecordHeader(length, crc, rows, wire=magic == MAGIC_WIRE)


class Headers(NamedTuple):
    """The headers of many records at once (:func:`parse_headers`)."""

    valid: np.ndarray  # bool: a record header is there
    wire: np.ndarray  # bool: message records, else an Arrow batch
    payload_length: np.ndarray  # int64


def parse_headers(raw: np.ndarray, at: np.ndarray) -> Headers:
    """:func:`parse_header` of the records at each position `at` of `raw` (uint8), with numpy; the
    caller checks that each header lies inside `raw`."""
    magic, length, _, rows = (read_big_endian(raw, at + 4 * field, BE_U32) for field in range(4))
    arrow = magic == MAGIC
    wire = magic == MAGIC_WIRE
    valid = (arrow | wire) & (rows > 0) & (length >= rows) & ~(arrow & (length % _ALIGN != 0))
    return Headers(valid, wire, length)


def checksum_matches(header: RecordHeader, payload: bytes | memoryview) -> bool:
    return len(payload) == header.payload_length and zlib.crc32(payload) == header.crc


def decode_payload(header: RecordHeader, payload: bytes | memoryview) -> StoredBatch:
    """The stored batch of a payload: Arrow batches use its memory; message records are kept as bytes."""
    if header.wire:
        return WireRecords.parse(bytes(payload))
    return arrow_payload(pa.py_buffer(payload))


def arrow_payload(payload: pa.Buffer) -> pa.RecordBatch:
    """The Arrow batch of an `RSB1` payload, using its memory."""
    return pa.ipc.read_record_batch(payload, STORED_SCHEMA)
