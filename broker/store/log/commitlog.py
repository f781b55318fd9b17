"""The commit log: stored batches appended to segment files named by their start offset.

Offsets are byte positions in one logical log; segment files hold consecutive ranges of it and
are named by their first offset (20 digits, as RocketMQ names its files). A segment is closed once
it reaches the configured size, so a record never spans two files. Blocking file work (`write`,
`sync`, `Segment.read`) is meant for the store's I/O and reader threads; bookkeeping (`reserve`,
`register`, `locate_many`, the batch cache and the segment lists) belongs to the event loop, and no
other thread touches it once the store serves (recovery runs before that, on the I/O thread). The
two never share state: file work uses positional I/O on file descriptors, and a thread that reads
a batch is handed its segment by the loop.

Memory does not grow with the number of records: a segment remembers one record start per
64 KiB (broker/store/log/record_positions.py) and reads the headers of a granule when it must find a
record (broker/store/log/granules.py keeps the granules read last and the one being written); startup
reads only the headers its segments' positions files do not cover.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import itertools
import logging
import mmap
import os
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from broker.store.log import record
from broker.store.log.disk_space import disk_full_error, is_disk_full
from broker.store.log.durability import make_directories
from broker.store.log.granules import GranuleCache
from broker.store.log.record_positions import GRANULE, SAVE_EVERY_BYTES, RecordPositions, read_headers
from broker.store.log.stored import StoredBatch, as_batches, stored_size
from rocketspark.errors import StoreCorruptionError
from rocketspark.fileutil import fsync_directory

log = logging.getLogger(__name__)

_READ_CHUNK = 1024  # stored batches read (and their message records decoded) together by arrow_batches
#: memory a cached batch takes besides its bytes (the objects around them, its place in the cache):
#: about 400 bytes measured for a one-message record, so a cache of many small records stays in bounds
_CACHE_ENTRY_BYTES = 400
#: Arrow batches from this size are read from a mapping of their segment (smaller ones: pread)
MAP_FROM_BYTES = 1024 * 1024
_serials = itertools.count()


def segment_name(start: int) -> str:
    return f"{start:020d}"


@dataclass(eq=False)
class Segment:
    start: int
    path: Path
    fd: int
    positions_path: Path  # the saved record positions of its flushed part
    size: int = 0  # bytes of valid records
    directory_synced: bool = True  # False until the directory holding a new segment's name is fsynced
    positions: RecordPositions = field(default_factory=RecordPositions)
    serial: int = field(default_factory=lambda: next(_serials))

    @property
    def end(self) -> int:
        return self.start + self.size

    def close(self) -> None:
        os.close(self.fd)

    def delete(self) -> None:
        """Close and remove the file (blocking: the I/O thread, once no read uses the segment)."""
        self.close()
        self.path.unlink(missing_ok=True)
        self.positions_path.unlink(missing_ok=True)

    def record_starts(self, start: int, end: int) -> Iterator[int]:
        """Commit log offsets of the records that start in [start, end), read from disk (blocking)."""
        local = max(start - self.start, 0)
        if local >= self.size:
            return
        first = self.positions.granule_start(local)
        for position, _ in read_headers(self.fd, first, min(end - self.start, self.size)):
            if position >= local:
                yield self.start + position

    def read(self, position: int) -> StoredBatch:
        """The batch at commit log offset `position` of this segment, from disk (blocking). Large
        Arrow batches are read from a mapping of the file, smaller records with a pread."""
        local = position - self.start
        header = record.parse_header(os.pread(self.fd, record.HEADER_SIZE, local))
        if header is None:
            raise StoreCorruptionError(f"no stored batch starts at commit log offset {position}")
        if not header.wire and header.payload_length >= MAP_FROM_BYTES:
            return record.decode_payload(header, self.mapped(position + record.HEADER_SIZE, header.payload_length))
        return record.decode_payload(header, os.pread(self.fd, header.payload_length, local + record.HEADER_SIZE))

    def mapped(self, position: int, length: int) -> memoryview:
        """Bytes [position, position + length) of the commit log, mapped from this segment's file
        rather than copied (blocking: a reader thread). A large read is made about once, so a copy
        only faults in fresh pages to hold it: a 20 MB pread took 8 ms, mostly page faults. The
        mapping lasts as long as a view of it, and keeps its pages if the file is deleted meanwhile;
        callers map only registered records, which are never cut back while the store serves."""
        local = position - self.start
        base = local - local % mmap.ALLOCATIONGRANULARITY
        try:
            mapped = mmap.mmap(self.fd, local - base + length, access=mmap.ACCESS_READ, offset=base)
        except ValueError:
            raise StoreCorruptionError(f"the commit log ends inside {position}..{position + length}") from None
        return memoryview(mapped)[local - base :]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the next record goes: its offset and the segment that will hold it."""

    position: int
    segment: Segment


def _cached_size(batch: StoredBatch) -> int:
    return stored_size(batch) + _CACHE_ENTRY_BYTES


class CommitLog:
    def __init__(self, directory: Path, segment_size: int, cache_bytes: int, positions_dir: Path | None = None) -> None:
        self.directory = directory
        self.positions_dir = positions_dir or directory.parent / "positions"
        self.segment_size = segment_size
        self.segments: list[Segment] = []
        self._starts: list[int] = []
        self._cache: OrderedDict[int, StoredBatch] = OrderedDict()
        self._cache_bytes = 0
        self._cache_limit = cache_bytes
        self._unflushed: set[Segment] = set()
        # what lookups read of granules; its `reader` runs their blocking reads (set by the store)
        self.granules = GranuleCache(live=lambda segment: segment in self.segments)

    # -- offsets -------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.segments[0].start if self.segments else 0

    @property
    def max_offset(self) -> int:
        return self.segments[-1].end if self.segments else 0

    # -- recovery ------------------------------------------------------------------------------

    def recover(self, verify_from: int) -> int:
        """Open the segments, rebuild the batch index and cut off a torn tail.

        Checksums are verified for records at or after `verify_from` (what may not have reached
        the disk before a crash); earlier ones were flushed and are trusted. Returns the end of
        the valid log. Records accepted after `verify_from` are fsynced: they may have been in the
        page cache only, and the caller counts the whole valid log as flushed.
        """
        make_directories(self.directory)
        make_directories(self.positions_dir)
        paths = sorted(p for p in self.directory.iterdir() if p.name.isdigit())
        for index, path in enumerate(paths):
            segment = self._open(int(path.name), path)
            file_size = os.fstat(segment.fd).st_size
            saved = segment.positions.load(segment.positions_path, segment.fd, file_size, verify_from - segment.start)
            valid = self._scan(segment, saved, verify_from, file_size)
            if segment.start + valid > verify_from:
                os.fsync(segment.fd)
            if valid < file_size:
                log.warning(
                    "commit log %s: %d bytes after offset %d are not a complete record; truncating",
                    path.name,
                    file_size - valid,
                    segment.start + valid,
                )
                os.ftruncate(segment.fd, valid)
                os.fsync(segment.fd)
                self._add_segment(segment)
                for later in paths[index + 1 :]:
                    log.error("commit log segment %s follows a torn record; deleting it", later.name)
                    later.unlink()
                    (self.positions_dir / later.name).unlink(missing_ok=True)
                break
            self._add_segment(segment)
        names = {s.path.name for s in self.segments}
        for stale in [p for p in self.positions_dir.iterdir() if p.name not in names]:
            stale.unlink()  # of a segment deleted before its positions file
        return self.max_offset

    def _open(self, start: int, path: Path) -> Segment:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        return Segment(start, path, fd, self.positions_dir / path.name)

    def _add_segment(self, segment: Segment) -> None:
        self.segments.append(segment)
        self._starts.append(segment.start)

    @staticmethod
    def _scan(segment: Segment, start: int, verify_from: int, file_size: int) -> int:
        """Read the headers from `start` (0, or the end of what the positions file covers): the
        end of the valid records. Checksums are checked at or after `verify_from`."""
        position = start
        for at, header in read_headers(segment.fd, start, file_size):
            if at + header.total_length > file_size:
                break
            if segment.start + at >= verify_from:
                payload = os.pread(segment.fd, header.payload_length, at + record.HEADER_SIZE)
                if not record.checksum_matches(header, payload):
                    break
            segment.positions.cover(at, header.total_length)
            position = at + header.total_length
        segment.size = position
        return position

    # -- appending -----------------------------------------------------------------------------

    def reserve(self) -> Placement:
        """The position of the next record, rolling to a new segment when the current one is full."""
        if not self.segments or self.segments[-1].size >= self.segment_size:
            start = self.max_offset
            self.directory.mkdir(parents=True, exist_ok=True)
            segment = self._open(start, self.directory / segment_name(start))
            segment.directory_synced = False
            self._add_segment(segment)
            log.info("commit log segment %s created", segment_name(start))
        segment = self.segments[-1]
        return Placement(segment.end, segment)

    @staticmethod
    def write(placement: Placement, header: bytes, payload: pa.Buffer | bytes) -> None:
        """Write one record at its placement (I/O thread, or the appender's loop for small records).

        A failed write leaves nothing behind it (the file is cut back), so no stray bytes follow the
        segment's records; a full disk is answered SERVICE_NOT_AVAILABLE."""
        offset = placement.position - placement.segment.start
        try:
            written = os.pwritev(placement.segment.fd, [header, memoryview(payload)], offset)
            if written < len(header) + len(memoryview(payload)):
                raise OSError(errno.ENOSPC, f"only {written} bytes of a record were written")
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(placement.segment.fd, offset)
            if is_disk_full(exc):
                raise disk_full_error(f"writing the commit log failed: {exc.strerror}") from exc
            raise

    def register(self, placement: Placement, length: int, batch: StoredBatch, *, synced: bool) -> None:
        """Make a written record visible to reads (event loop); `synced`: `sync` covered it already."""
        segment = placement.segment
        segment.positions.cover(placement.position - segment.start, length)
        self.granules.open.add(segment.serial, placement.position - segment.start, length, batch.num_rows)
        segment.size = placement.position + length - segment.start
        if not synced:
            self._unflushed.add(segment)
        self.cache_put(placement.position, batch)

    def take_unflushed(self) -> list[Segment]:
        """Segments with records registered since the last call (event loop); `sync` them to make
        those records durable, or hand them back with `restore_unflushed` if that fails."""
        segments = list(self._unflushed)
        self._unflushed.clear()
        return segments

    def restore_unflushed(self, segments: list[Segment]) -> None:
        self._unflushed.update(s for s in segments if s in self.segments)

    def sync(self, segments: list[Segment]) -> None:
        """fsync the segments' data and, for new segments, the directory holding their names (I/O thread)."""
        new = [s for s in segments if not s.directory_synced]
        for segment in segments:
            os.fsync(segment.fd)
        if new:
            fsync_directory(self.directory)
            for segment in new:
                segment.directory_synced = True

    # -- reading -------------------------------------------------------------------------------

    def segment_for(self, offset: int) -> Segment | None:
        index = bisect.bisect_right(self._starts, offset) - 1
        if index < 0:
            return None
        segment = self.segments[index]
        return segment if offset < segment.end else None

    def cached(self, position: int) -> StoredBatch | None:
        batch = self._cache.get(position)
        if batch is not None:
            self._cache.move_to_end(position)
        return batch

    def is_cached(self, position: int) -> bool:
        return position in self._cache

    def load(self, position: int) -> StoredBatch:
        """Read the batch at `position` from disk (blocking). It looks the segment up in lists the
        event loop changes, so other threads resolve the segment on the loop and call `Segment.read`."""
        return self.segment_holding(position).read(position)

    def arrow_batches(self, positions: Sequence[int]) -> Iterator[tuple[int, pa.RecordBatch]]:
        """(position, STORED_SCHEMA batch) of each of `positions`, in their order, from disk
        (blocking: recovery). Read a chunk at a time, so runs of message records decode together."""
        for start in range(0, len(positions), _READ_CHUNK):
            part = positions[start : start + _READ_CHUNK]
            yield from zip(part, as_batches([self.load(position) for position in part]), strict=True)

    def segment_holding(self, position: int) -> Segment:
        segment = self.segment_for(position)
        if segment is None:
            raise LookupError(f"commit log offset {position} is outside {self.min_offset}..{self.max_offset}")
        return segment

    async def locate_many(self, commit_log_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The records (their positions, -1 where no message is) and rows of the messages at
        `commit_log_offsets` (event loop), from the records of their granules (`granules`)."""
        offsets = commit_log_offsets.astype(np.int64, copy=False)
        return self._locate(offsets, await self.granules.records(self._granules_of(offsets)))

    def _granules_of(self, offsets: np.ndarray) -> list[tuple[Segment, int]]:
        found: list[tuple[Segment, int]] = []
        for segment, inside in self._segments_holding(offsets):
            found += [(segment, g) for g in np.unique((offsets[inside] - segment.start) // GRANULE).tolist()]
        return found

    def segment_runs(self, positions: np.ndarray) -> list[tuple[Segment, slice]]:
        """Each segment holding some of `positions` (ascending, each in a segment), with the slice
        of `positions` it holds (event loop)."""
        first = bisect.bisect_right(self._starts, int(positions[0])) - 1
        last = bisect.bisect_right(self._starts, int(positions[-1]))
        segments = self.segments[first:last]
        cuts = np.searchsorted(positions, [s.start for s in segments[1:]]).tolist()
        bounds = [0, *cuts, len(positions)]
        return [(s, slice(lo, hi)) for s, lo, hi in zip(segments, bounds, bounds[1:], strict=False) if lo < hi]

    def _segments_holding(self, offsets: np.ndarray) -> Iterator[tuple[Segment, np.ndarray]]:
        if not len(offsets):
            return
        first = max(0, bisect.bisect_right(self._starts, int(offsets.min())) - 1)
        last = bisect.bisect_right(self._starts, int(offsets.max()))
        for segment in self.segments[first:last]:
            inside = np.flatnonzero((offsets >= segment.start) & (offsets < segment.end))
            if len(inside):
                yield segment, inside

    def _locate(
        self, offsets: np.ndarray, read: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]
    ) -> tuple[np.ndarray, np.ndarray]:
        positions = np.full(len(offsets), -1, dtype=np.int64)
        rows = np.zeros(len(offsets), dtype=np.int64)
        for segment, inside in self._segments_holding(offsets):
            local = offsets[inside] - segment.start
            granules = local // GRANULE
            for granule in np.unique(granules).tolist():
                at = granules == granule
                if (segment.serial, granule) not in read:  # the segment grew meanwhile: not wanted then
                    continue
                starts, counts = read[(segment.serial, granule)]
                index = np.searchsorted(starts, local[at], side="right") - 1
                which, index = inside[at][index >= 0], index[index >= 0]
                row = offsets[which] - segment.start - starts[index]
                held = row < counts[index]
                positions[which[held]] = segment.start + starts[index[held]]
                rows[which[held]] = row[held]
        return positions, rows

    def batches_between(self, start: int, end: int) -> list[int]:
        """Positions of the records in [start, end), in log order, read from disk (blocking: the
        caller bounds the range, such as what a checkpoint does not cover)."""
        result: list[int] = []
        for segment in self.segments:
            if segment.end <= start or segment.start >= end:
                continue
            result.extend(segment.record_starts(start, end))
        return result

    def positions_to_save(self, flushed: int, *, everything: bool) -> list[tuple[Segment, np.ndarray]]:
        """Positions files worth writing now (event loop): of each segment whose flushed part grew by
        SAVE_EVERY_BYTES since its last one, or was completed; of every segment when `everything`.
        `flushed` is the commit log's flushed offset, a record boundary."""
        saves = []
        for index, segment in enumerate(self.segments):
            closed = index < len(self.segments) - 1
            size = segment.size if flushed >= segment.end else flushed - segment.start
            if size <= segment.positions.saved:
                continue
            if everything or size - segment.positions.saved >= SAVE_EVERY_BYTES or (closed and size == segment.size):
                saves.append((segment, segment.positions.to_save(size)))
        return saves

    @staticmethod
    def save_positions(saves: list[tuple[Segment, np.ndarray]]) -> None:
        """Write the files of :meth:`positions_to_save` (blocking: the store's I/O thread)."""
        for segment, saved in saves:
            RecordPositions.save(segment.positions_path, saved)
            segment.positions.saved = int(saved[1])

    def cache_put(self, position: int, batch: StoredBatch) -> None:
        if position in self._cache:
            return
        self._cache[position] = batch
        self._cache_bytes += _cached_size(batch)
        while self._cache_bytes > self._cache_limit and len(self._cache) > 1:
            _, evicted = self._cache.popitem(last=False)
            self._cache_bytes -= _cached_size(evicted)

    # -- retention -----------------------------------------------------------------------------

    def detach_expired(self, reserved_s: float, now: float | None = None, *, free_bytes: int = 0) -> list[Segment]:
        """Forget closed segments untouched for `reserved_s` seconds, oldest first, and more of the
        oldest until `free_bytes` are freed (a disk past diskMaxUsedSpaceRatio). The caller deletes
        their files (`Segment.delete`) once no read can use them."""
        now = time.time() if now is None else now
        expired: list[Segment] = []
        while len(self.segments) > 1:
            oldest = self.segments[0]
            age = now - os.fstat(oldest.fd).st_mtime
            if age >= reserved_s:
                log.info("commit log segment %s expired after %.0f s; deleting", oldest.path.name, age)
            elif free_bytes > 0:
                log.warning("commit log segment %s deleted before its time: the disk is nearly full", oldest.path.name)
            else:
                break
            free_bytes -= oldest.size
            expired.append(oldest)
            self.segments.pop(0)
            self._starts.pop(0)
            self._unflushed.discard(oldest)
            self.granules.forget(oldest.serial)
            for position in [p for p in self._cache if p < oldest.end]:
                self._cache_bytes -= _cached_size(self._cache.pop(position))
        return expired

    def close(self) -> None:
        for segment in self.segments:
            segment.close()
        self.segments.clear()
        self._starts.clear()
        self._cache.clear()
        self.granules.clear()
        self._cache_bytes = 0
