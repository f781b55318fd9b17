"""Consume queues: per (topic, queue id), logical offsets 0, 1, 2, ... -> where the message is stored.

Each entry is 32 bytes: position of the stored batch, row in it, body size, tag hash code (Java
`String.hashCode` of the tags, as RocketMQ's tagsCode) and store time. Entries live in memory as
one numpy array per queue and are persisted in files of a fixed number of entries, named by the
logical offset of their first entry, like RocketMQ's consume queue files. The last file is never
deleted, so a queue emptied by retention keeps its offsets after a restart.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from broker.store.durability import make_directories
from broker.store.growable import GrowableArray
from rocketspark.fileutil import fsync_directory

log = logging.getLogger(__name__)

CQ_ENTRY = np.dtype([("batch_pos", "<i8"), ("row", "<i4"), ("size", "<i4"), ("tags_code", "<i8"), ("store_ts", "<i8")])


@dataclass(frozen=True, slots=True)
class PendingFlush:
    """Entries not yet on disk, copied on the event loop for the I/O thread to write."""

    queue: ConsumeQueue
    first_offset: int
    entries: np.ndarray


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, directory: Path, entries_per_file: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory = directory
        self.entries_per_file = entries_per_file
        self._entries = GrowableArray(CQ_ENTRY)
        self.min_offset = 0
        self._flushed = 0  # logical offset up to which entries are written to files

    @property
    def max_offset(self) -> int:
        """The next logical offset to be written, i.e. the number of messages ever stored."""
        return self.min_offset + len(self._entries)

    def entries(self, start: int, count: int) -> np.ndarray:
        """A view of up to `count` entries from logical offset `start` (clamped to what exists)."""
        begin = max(start, self.min_offset) - self.min_offset
        return self._entries.view()[begin : begin + max(count, 0)]

    # -- loading and recovery ------------------------------------------------------------------

    def load(self) -> None:
        if not self.directory.is_dir():
            return
        files = sorted(p for p in self.directory.iterdir() if p.name.isdigit())
        if not files:
            return
        self.min_offset = int(files[0].name)
        expected = self.min_offset
        for path in files:
            start = int(path.name)
            if start != expected:
                raise ValueError(f"consume queue {self.topic}:{self.queue_id}: file {path.name} leaves a gap")
            data = np.fromfile(path, dtype=np.uint8)
            whole = len(data) // CQ_ENTRY.itemsize
            self._entries.append(data[: whole * CQ_ENTRY.itemsize].view(CQ_ENTRY))
            expected = start + whole
            if whole < self.entries_per_file:
                break
        self._flushed = self.max_offset

    def truncate_at_position(self, batch_pos: int) -> None:
        """Forget entries of batches stored at or after `batch_pos` (they are dispatched again)."""
        positions = self._entries.view()["batch_pos"]
        keep = int(np.searchsorted(positions, batch_pos, side="left"))
        if keep < len(self._entries):
            self._entries.truncate(keep)
            self._truncate_files(self.max_offset)

    def drop_below(self, min_commit_log_offset: int) -> None:
        """Retention: forget entries whose batches were deleted (their files: `delete_files_below`)."""
        positions = self._entries.view()["batch_pos"]
        dropped = int(np.searchsorted(positions, min_commit_log_offset, side="left"))
        if dropped:
            self._entries.drop_head(dropped)
            self.min_offset += dropped

    def delete_files_below(self, min_offset: int) -> None:
        """Delete files holding only offsets below `min_offset`, never the last one (I/O thread)."""
        for path in self._files()[:-1]:
            if int(path.name) + self.entries_per_file <= min_offset:
                path.unlink(missing_ok=True)

    def _files(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.iterdir() if p.name.isdigit())

    def _truncate_files(self, max_offset: int) -> None:
        for path in self._files():
            start = int(path.name)
            if start >= max_offset and start > self.min_offset:
                path.unlink()
            elif start + self.entries_per_file > max_offset:
                os.truncate(path, (max_offset - start) * CQ_ENTRY.itemsize)
        self._flushed = min(self._flushed, max_offset)

    # -- appending -----------------------------------------------------------------------------

    def append(self, first_offset: int, entries: np.ndarray) -> None:
        """Add entries for logical offsets first_offset...; already known offsets are skipped.

        Known offsets whose entry names an older batch belong to an earlier life of the topic (it
        was deleted and created again, and recovery dispatches the commit log in order): the later
        batch wins and the queue starts over at `first_offset`.
        """
        skip = self.max_offset - first_offset
        if skip < 0:
            raise ValueError(
                f"consume queue {self.topic}:{self.queue_id} expects offset {self.max_offset}, got {first_offset}"
            )
        if len(self._entries) == 0 and self.max_offset == 0 and first_offset > 0:
            self.min_offset = first_offset  # a queue whose files were lost: start where the log says
            skip = 0
        elif skip > 0 and first_offset >= self.min_offset:
            known = self.entries(first_offset, 1)[0]
            if int(known["batch_pos"]) < int(entries[0]["batch_pos"]):
                self._start_over(first_offset)
                skip = 0
        if skip < len(entries):
            self._entries.append(entries[skip:])

    def _start_over(self, offset: int) -> None:
        """Forget every entry and file and continue at `offset` (recovery, on the I/O thread)."""
        log.info("consume queue %s:%d starts over at %d: its topic was created", self.topic, self.queue_id, offset)
        self._entries.truncate(0)
        self.min_offset = offset
        self._truncate_files(offset)

    def pending_flush(self) -> PendingFlush | None:
        if self._flushed >= self.max_offset:
            return None
        start = max(self._flushed, self.min_offset)
        return PendingFlush(self, start, self.entries(start, self.max_offset - start).copy())

    def mark_flushed(self, offset: int) -> None:
        self._flushed = max(self._flushed, offset)

    def write(self, pending: PendingFlush) -> None:
        """Write pending entries to their files and fsync them, and the names of new ones (I/O thread)."""
        make_directories(self.directory)
        offset = pending.first_offset
        entries = pending.entries
        while len(entries):
            file_start = offset - offset % self.entries_per_file
            room = file_start + self.entries_per_file - offset
            chunk, entries = entries[:room], entries[room:]
            path = self.directory / f"{file_start:020d}"
            created = not path.exists()
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, chunk.tobytes(), (offset - file_start) * CQ_ENTRY.itemsize)
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:
                fsync_directory(self.directory)
            offset += len(chunk)

    # -- queries -------------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """The first offset stored at or after `timestamp_ms`; the max offset if none is."""
        times = self._entries.view()["store_ts"]
        return self.min_offset + int(np.searchsorted(times, timestamp_ms, side="left"))

    def earliest_store_time(self) -> int:
        return int(self._entries.view()["store_ts"][0]) if len(self._entries) else 0

    def last_entry(self) -> np.void | None:
        return self._entries.view()[-1] if len(self._entries) else None

    def delete_files(self) -> None:
        for path in self._files():
            path.unlink(missing_ok=True)
        if self.directory.is_dir():
            self.directory.rmdir()
