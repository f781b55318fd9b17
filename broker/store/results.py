"""What the store hands back: put results, get-message results (with RocketMQ's status names), queue stats."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from broker.store.log.stored import Piece, arrow_batches, piece_rows, standard_records


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # stored, but the fsync outlasted syncFlushTimeout


@dataclass(frozen=True, slots=True)
class PutResult:
    status: PutStatus
    queue_id: int
    first_queue_offset: int
    count: int
    first_commit_log_offset: int
    # duplicate detection (broker/store/duplicates/window.py): rows of the send not stored again, and, when
    # there are any, the commit log offset of every row of a standard send (a duplicate's first copy)
    duplicates: int = 0
    row_commit_log_offsets: tuple[int, ...] | None = None

    @property
    def commit_log_offsets(self) -> range | tuple[int, ...]:
        if self.row_commit_log_offsets is not None:
            return self.row_commit_log_offsets
        return range(self.first_commit_log_offset, self.first_commit_log_offset + self.count)


class GetStatus(enum.Enum):
    """`GetMessageStatus` of Apache RocketMQ's store."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    pieces: list[Piece] = field(default_factory=list)  # rows of stored batches, in offset order

    @property
    def message_count(self) -> int:
        return sum(len(p.rows) for p in self.pieces)

    def batches(self) -> list[pa.RecordBatch]:
        """The messages as STORED_SCHEMA batches (an Arrow pull's answer)."""
        return arrow_batches(self.pieces)

    def rows(self) -> list[dict[str, Any]]:
        """The messages as STORED_SCHEMA rows (a 5.x receive's: broker/pop/reading.py)."""
        return piece_rows(self.pieces)

    def records(self, store_host: str) -> bytes:
        """The messages as RocketMQ's records (a standard pull's answer)."""
        return standard_records(self.pieces, store_host)


@dataclass(frozen=True, slots=True)
class QueueStats:
    min_offset: int
    max_offset: int
    last_store_timestamp: int
