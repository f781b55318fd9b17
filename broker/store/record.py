"""Framing of one stored batch in a commit log segment.

    uint32 magic "RSB1"   uint32 payload length   uint32 crc32(payload)   uint32 row count
    payload: one Arrow IPC record batch message (STORED_SCHEMA), a multiple of 8 bytes

The 16-byte header keeps payloads 8-byte aligned, so Arrow reads them without copying. The
checksum finds a torn tail after a crash. A message's commit log offset is the position of its
record plus its row: every row takes more than one payload byte, so these offsets are unique and
grow with the log.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import pyarrow as pa

from rocketspark.message.schema import STORED_SCHEMA

MAGIC = 0x52534231
HEADER = struct.Struct(">IIII")
HEADER_SIZE = HEADER.size


@dataclass(frozen=True, slots=True)
class RecordHeader:
    payload_length: int
    crc: int
    rows: int

    @property
    def total_length(self) -> int:
        return HEADER_SIZE + self.payload_length


def encode(batch: pa.RecordBatch) -> tuple[bytes, pa.Buffer]:
    """The header and payload of `batch` (written together, kept apart to avoid a copy)."""
    payload = batch.serialize()
    header = HEADER.pack(MAGIC, payload.size, zlib.crc32(payload), batch.num_rows)
    return header, payload


def parse_header(data: bytes | memoryview) -> RecordHeader | None:
    """The header at the start of `data`, or None if these bytes are not a record header."""
    if len(data) < HEADER_SIZE:
        return None
    magic, length, crc, rows = HEADER.unpack_from(data, 0)
    if magic != MAGIC or length % 8 or rows == 0 or length < rows:
        return None
    return RecordHeader(length, crc, rows)


def checksum_matches(header: RecordHeader, payload: bytes | memoryview) -> bool:
    return len(payload) == header.payload_length and zlib.crc32(payload) == header.crc


def decode_payload(payload: pa.Buffer | bytes) -> pa.RecordBatch:
    buffer = payload if isinstance(payload, pa.Buffer) else pa.py_buffer(payload)
    return pa.ipc.read_record_batch(buffer, STORED_SCHEMA)
