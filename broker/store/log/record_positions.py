"""Where the records of a commit log segment start, in memory that does not grow with their number.

A segment keeps one position per GRANULE bytes of it: the start of the record that holds the
granule's first byte (8 bytes per 64 KiB, 128 KiB for a 1 GiB segment, whether it holds five
records or five million). The records of one granule are found by reading their headers from
disk, in blocks (:func:`read_headers`, :meth:`RecordPositions.granule`), so the broker needs no
per-record memory to turn a message's commit log offset into its record and row (the granules
read last, and the one being written, are kept: broker/store/log/granules.py).

The positions of a segment's flushed part are saved to a small file of their own (one per
segment, in the store's `positions` directory) as the segment grows and at shutdown; startup
loads it and reads only the headers written after it (:meth:`RecordPositions.load`), instead of
every header of the log.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from broker.store.log import record
from broker.store.log.growable import GrowableArray
from rocketspark.fileutil import write_atomically

log = logging.getLogger(__name__)

GRANULE = 64 * 1024  # bytes of a segment per remembered record start
_READ_BLOCK = 256 * 1024  # bytes of headers (and payloads between them) read at once
#: a segment's positions file is saved again once this many more of its bytes are flushed
SAVE_EVERY_BYTES = 32 * 1024 * 1024


def read_headers(fd: int, start: int, stop: int) -> Iterator[tuple[int, record.RecordHeader]]:
    """(position in the file, header) of the records from `start` (a record's start) on, while they
    start before `stop`; stops early at bytes that are not a header. Blocking."""
    block = b""
    block_at = position = start
    while position < stop:
        offset = position - block_at
        if offset + record.HEADER_SIZE > len(block):
            block = os.pread(fd, _READ_BLOCK, position)
            block_at, offset = position, 0
        header = record.parse_header(memoryview(block)[offset : offset + record.HEADER_SIZE])
        if header is None:
            return
        yield position, header
        position += header.total_length


class RecordPositions:
    """The record start of each granule of one segment, as positions in its file."""

    def __init__(self) -> None:
        self._starts = GrowableArray(np.int64)
        self.saved = 0  # bytes of the segment its positions file describes

    @property
    def nbytes(self) -> int:
        return len(self._starts) * 8

    def cover(self, position: int, length: int) -> None:
        """A record of `length` bytes now starts at `position` (the segment's end until now)."""
        granules = -(-(position + length) // GRANULE) - len(self._starts)
        if granules > 0:
            self._starts.append(np.full(granules, position, dtype=np.int64))

    def granule_start(self, position: int) -> int:
        """The start of the record holding `position` or the nearest one before it, within a granule."""
        return int(self._starts.view()[position // GRANULE])

    def granule(self, fd: int, number: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        """(positions, row counts) of the records that hold bytes of granule `number` of a segment
        of `size` valid bytes, read from disk (blocking)."""
        stop = min((number + 1) * GRANULE, size)
        found = list(read_headers(fd, int(self._starts.view()[number]), stop))
        return (
            np.fromiter((p for p, _ in found), dtype=np.int64, count=len(found)),
            np.fromiter((h.rows for _, h in found), dtype=np.int64, count=len(found)),
        )

    def to_save(self, size: int) -> np.ndarray:
        """What the positions file of a segment's first `size` bytes (a record boundary) holds: the
        granule size, `size`, then the granules' record starts (a copy, written on another thread)."""
        starts = self._starts.view()[: -(-size // GRANULE)]
        return np.concatenate([np.array([GRANULE, size], dtype=np.int64), starts])

    @staticmethod
    def save(path: Path, saved: np.ndarray) -> None:
        """Write a positions file (blocking: the store's I/O thread)."""
        write_atomically(path, saved.astype("<i8").tobytes())

    def load(self, path: Path, fd: int, file_size: int, trusted: int) -> int:
        """Take the positions a segment's file saved, as far as they fit the segment and reach no
        further than `trusted` (its bytes the checkpoint vouches for, whose checksums are not read
        again): where reading headers goes on, a record's start (0 without a usable file)."""
        try:
            saved = np.frombuffer(path.read_bytes(), dtype="<i8").astype(np.int64)
        except FileNotFoundError:
            return 0
        if len(saved) < 2 or int(saved[0]) != GRANULE:
            log.warning("record positions file %s is unreadable; reading the segment's headers instead", path)
            return 0
        size, starts = int(saved[1]), saved[2:]
        if not 0 < size <= file_size or len(starts) != -(-size // GRANULE) or np.any(np.diff(starts) < 0):
            log.warning("record positions file %s does not fit its segment; reading its headers instead", path)
            return 0
        if trusted < size:  # go on from the start of the record holding the first byte not vouched for
            granules = max(trusted, 0) // GRANULE
            size, starts = int(starts[granules]), starts[:granules]
            if not size:
                return 0
        last = int(starts[-1])
        if record.parse_header(os.pread(fd, record.HEADER_SIZE, last)) is None:
            log.warning("record positions file %s names no record at %d; reading the headers instead", path, last)
            return 0
        self._starts = GrowableArray(np.int64, len(starts))
        self._starts.append(starts)
        self.saved = size
        return size
