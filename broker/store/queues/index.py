"""Index of messages by key, for QUERY_MESSAGE: `topic#key` for every KEYS token and the msgId.

As RocketMQ's IndexFile, each file holds a header, a table of hash slots and then entries in
store order; there is one file per commit log segment, deleted with it. An entry holds the Java
`String.hashCode` of `topic#key`, the number of the previous entry that fell in the same slot, the
message's commit log offset and its store time; a slot holds the number of its newest entry
(numbers count from 1; 0 ends a chain). A lookup follows one chain per file and the caller checks
the real keys, so it reads a few entries, never a whole file.

Entries are written when the store flushes its logics and read back with positional reads. The
slot table of a file still taking entries lives in memory; it is written to the file, and the
header marked as covering that many entries, once the file's segment is complete or the store
stops. A file whose table covers fewer entries than it holds (a crash, or a truncation by
recovery) gets its table rebuilt from its entries when it is opened. So memory holds one slot
table and the entries of the last second, whatever the number of messages stored.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker.store.log.durability import make_directories
from broker.store.log.growable import GrowableArray
from rocketspark.message.hashing import java_string_hash, java_string_hash_array

log = logging.getLogger(__name__)

INDEX_ENTRY = np.dtype([("hash", "<i4"), ("prev", "<i4"), ("commit_log_offset", "<i8"), ("store_ts", "<i8")])
#: entries of index files written before the hash slots (no header): read once and converted
LEGACY_ENTRY = np.dtype([("hash", "<i8"), ("commit_log_offset", "<i8"), ("store_ts", "<i8")])
MAGIC = b"RSI2"
HEADER = struct.Struct("<4sIQ")  # magic, slot count, entries the slot table on disk covers
#: after HEADER: the earliest and latest store time of the file's written entries (0, 0: not known)
TIMES = struct.Struct("<qq")
HEADER_SIZE = 64
_CHUNK = 1 << 20  # entries read together when a slot table is rebuilt

#: the columns of a stored batch that its index entries are built from
INDEXED_COLUMNS = ["topic", "keys", "msg_id", "commit_log_offset", "store_timestamp"]


def index_entries(batch: pa.RecordBatch) -> np.ndarray:
    """The index entries of stored messages (all columns, or INDEXED_COLUMNS): each KEYS token
    and the msgId, per message, in commit log order; their chains are linked by `IndexFile.add`."""
    keys = pc.split_pattern(pc.fill_null(batch.column("keys"), ""), " ")
    tokens = pc.list_flatten(keys)
    parents = pc.list_parent_indices(keys)
    present = pc.not_equal(tokens, "")
    tokens, parents = pc.filter(tokens, present), pc.filter(parents, present)
    rows = pa.concat_arrays([parents.cast(pa.int64()), pa.array(np.arange(batch.num_rows, dtype=np.int64))])
    names = pa.concat_arrays([tokens, batch.column("msg_id")])
    joined = pc.binary_join_element_wise(pc.take(batch.column("topic"), rows), names, "#")
    row_numbers = rows.to_numpy()
    order = np.argsort(row_numbers, kind="stable")
    entries = np.zeros(len(rows), dtype=INDEX_ENTRY)
    entries["hash"] = java_string_hash_array(joined)[order]
    entries["commit_log_offset"] = batch.column("commit_log_offset").to_numpy()[row_numbers[order]]
    entries["store_ts"] = batch.column("store_timestamp").to_numpy()[row_numbers[order]]
    return entries


def _slots_of(hashes: np.ndarray, slot_count: int) -> np.ndarray:
    return (hashes.astype(np.int64) & 0xFFFFFFFF) % slot_count


def key_hash(topic: str, key: str) -> int:
    """The hash a message's key (or msgId) is indexed under."""
    return java_string_hash(f"{topic}#{key}")


@dataclass(frozen=True, slots=True)
class ChainWalk:
    """One index file's part of a lookup: its chain's entries that were in memory, then, from
    entry `next_number` (or from the slot at `slot_at` when the file's table was current), the
    chain's entries in the file. Those are written entries, which never change while the store
    serves (recovery alone truncates), so a reader thread follows them."""

    path: Path
    entries_at: int
    slot_at: int  # file position of the chain's slot; -1: the chain starts in memory
    next_number: int  # the chain's first entry in the file (0: none); unused when slot_at >= 0
    in_memory: np.ndarray

    @property
    def reads_file(self) -> bool:
        return self.slot_at >= 0 or self.next_number > 0

    def entries(self) -> Iterator[np.void]:
        """The chain, newest first (blocking reads, when `reads_file`)."""
        yield from self.in_memory
        if not self.reads_file:
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            number = self.next_number
            if self.slot_at >= 0:
                number = int(np.frombuffer(os.pread(fd, 4, self.slot_at), dtype=np.int32)[0])
            while number:
                data = os.pread(fd, INDEX_ENTRY.itemsize, self.entries_at + (number - 1) * INDEX_ENTRY.itemsize)
                entry = np.frombuffer(data, dtype=INDEX_ENTRY)[0]
                yield entry
                number = int(entry["prev"])
        finally:
            os.close(fd)


@dataclass(frozen=True, slots=True)
class KeyLookup:
    """A lookup of one hash within a time range, over the files whose time range overlaps it,
    newest first; taken on the event loop, run by :meth:`offsets` where `reads_files` says."""

    target: int
    begin_ms: int
    end_ms: int
    walks: tuple[ChainWalk, ...]

    @property
    def reads_files(self) -> bool:
        return any(walk.reads_file for walk in self.walks)

    def offsets(self, limit: int) -> list[int]:
        """Commit log offsets of candidate messages (newest first), by hash only."""
        found: list[int] = []
        for walk in self.walks:
            for entry in walk.entries():
                if int(entry["hash"]) == self.target and self.begin_ms <= int(entry["store_ts"]) <= self.end_ms:
                    found.append(int(entry["commit_log_offset"]))
                    if len(found) >= limit:
                        return found
        return found


class IndexFile:
    """The index of one commit log segment: header, slot table, entries."""

    def __init__(self, segment_start: int, path: Path, slot_count: int) -> None:
        self.segment_start = segment_start
        self.path = path
        self.slot_count = slot_count
        self.count = 0  # entries, written or not
        self.flushed = 0  # entries written to the file
        self._pending = GrowableArray(INDEX_ENTRY)  # entries [flushed, count)
        self.slots: np.ndarray | None = np.zeros(slot_count, dtype=np.int32)  # None: the file's table is current
        # the store times of the file's entries lie within [begin_ts, end_ts] (IndexFile's header in RocketMQ)
        self.begin_ts = 2**63 - 1
        self.end_ts = -(2**63)

    @property
    def _entries_at(self) -> int:
        return HEADER_SIZE + 4 * self.slot_count

    @classmethod
    def open(cls, path: Path, default_slots: int) -> IndexFile:
        """Open an existing file (blocking: recovery), converting one written before hash slots."""
        with path.open("rb") as file:
            head = file.read(HEADER.size + TIMES.size)
        if len(head) < HEADER.size or head[:4] != MAGIC:
            return cls._convert_legacy(path, default_slots)
        _, slot_count, covered = HEADER.unpack_from(head)
        index_file = cls(int(path.name), path, slot_count)
        index_file.count = index_file.flushed = max(0, path.stat().st_size - index_file._entries_at) // 24
        if covered == index_file.count:
            index_file.slots = None
        else:
            log.info("index file %s: rebuilding its hash slots from its %d entries", path.name, index_file.count)
            index_file.slots = index_file._rebuilt_slots()
        times = TIMES.unpack_from(head, HEADER.size) if len(head) == HEADER.size + TIMES.size else (0, 0)
        if covered == index_file.count and times != (0, 0):
            index_file.begin_ts, index_file.end_ts = times
        elif index_file.count:  # written before the header held them, or cut short: from the entries
            index_file._scan_times()
            with path.open("r+b") as file:
                file.seek(HEADER.size)
                file.write(TIMES.pack(index_file.begin_ts, index_file.end_ts))
        return index_file

    @classmethod
    def _convert_legacy(cls, path: Path, slot_count: int) -> IndexFile:
        legacy = np.fromfile(path, dtype=np.uint8)
        old = legacy[: len(legacy) // LEGACY_ENTRY.itemsize * LEGACY_ENTRY.itemsize].view(LEGACY_ENTRY)
        old = old[np.argsort(old["commit_log_offset"], kind="stable")]
        converted = cls(int(path.name), path.with_name(path.name + ".converting"), slot_count)
        entries = np.zeros(len(old), dtype=INDEX_ENTRY)
        for name in ("hash", "commit_log_offset", "store_ts"):
            entries[name] = old[name]
        converted.add(entries)
        pending = converted.pending()
        if pending is not None:
            converted.write(*pending)
        assert converted.slots is not None
        converted.write_slots(converted.slots, converted.count)
        os.replace(converted.path, path)
        log.info("index file %s converted to hash slots (%d entries)", path.name, len(entries))
        return cls.open(path, slot_count)

    # -- adding and writing --------------------------------------------------------------------

    def add(self, entries: np.ndarray) -> None:
        """Append entries (in commit log order), linking each into its slot's chain (event loop)."""
        slots = self.load_slots()
        numbers = np.arange(self.count + 1, self.count + 1 + len(entries), dtype=np.int32)
        buckets = _slots_of(entries["hash"], self.slot_count)
        order = np.argsort(buckets, kind="stable")
        ordered = buckets[order]
        first = np.ones(len(order), dtype=bool)
        first[1:] = ordered[1:] != ordered[:-1]
        previous = np.empty(len(order), dtype=np.int32)
        previous[first] = slots[ordered[first]]
        previous[1:][~first[1:]] = numbers[order[:-1]][~first[1:]]
        linked = entries.copy()
        linked["prev"][order] = previous
        last = np.ones(len(order), dtype=bool)
        last[:-1] = first[1:]
        slots[ordered[last]] = numbers[order[last]]
        self._pending.append(linked)
        self.count += len(entries)
        if len(entries):
            self.begin_ts = min(self.begin_ts, int(entries["store_ts"].min()))
            self.end_ts = max(self.end_ts, int(entries["store_ts"].max()))

    def load_slots(self) -> np.ndarray:
        """The slot table in memory, read from the file when only there (blocking: the store
        loads the newest file's table at startup, the only file that takes entries then)."""
        if self.slots is None:
            self.slots = np.fromfile(self.path, dtype=np.int32, count=self.slot_count, offset=HEADER_SIZE)
        return self.slots

    def pending(self) -> tuple[int, np.ndarray] | None:
        if self.flushed >= self.count:
            return None
        return self.flushed, self._pending.view()[: self.count - self.flushed].copy()

    def mark_flushed(self, upto: int) -> None:
        if upto > self.flushed:
            self._pending.drop_head(upto - self.flushed)
            self.flushed = upto

    def write(self, first: int, entries: np.ndarray) -> None:
        """Append entries to the file and fsync it (I/O thread). The header stops vouching for
        the slot table first: until the table is written again, opening the file rebuilds it.
        Its time range grows to cover the new entries."""
        make_directories(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            times = [int(entries["store_ts"].min()), int(entries["store_ts"].max())] if len(entries) else [0, 0]
            if os.fstat(fd).st_size >= self._entries_at:
                old = TIMES.unpack(os.pread(fd, TIMES.size, HEADER.size))
                if old != (0, 0):
                    times = [min(old[0], times[0]), max(old[1], times[1])] if len(entries) else list(old)
            else:
                os.ftruncate(fd, self._entries_at)
            os.pwrite(fd, HEADER.pack(MAGIC, self.slot_count, 0) + TIMES.pack(*times), 0)
            os.pwrite(fd, entries.tobytes(), self._entries_at + first * INDEX_ENTRY.itemsize)
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_slots(self, slots: np.ndarray, covered: int) -> None:
        """Write the slot table, then a header saying it covers `covered` entries (I/O thread)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, slots.tobytes(), HEADER_SIZE)
            os.fsync(fd)
            os.pwrite(fd, HEADER.pack(MAGIC, self.slot_count, covered), 0)
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- reading -------------------------------------------------------------------------------

    def entries(self, start: int, stop: int) -> np.ndarray:
        """Entries [start, stop): written ones with a positional read (blocking: recovery), the
        rest from memory."""
        if start >= self.flushed:
            return self._pending.view()[start - self.flushed : stop - self.flushed]
        fd = os.open(self.path, os.O_RDONLY)
        try:
            end = min(stop, self.flushed)
            size = (end - start) * INDEX_ENTRY.itemsize
            data = os.pread(fd, size, self._entries_at + start * INDEX_ENTRY.itemsize)
        finally:
            os.close(fd)
        written = np.frombuffer(data, dtype=INDEX_ENTRY)
        if stop <= self.flushed:
            return written
        return np.concatenate([written, self._pending.view()[: stop - self.flushed]])

    def _scan_times(self) -> None:
        for start in range(0, self.count, _CHUNK):
            stamps = self.entries(start, min(start + _CHUNK, self.count))["store_ts"]
            self.begin_ts = min(self.begin_ts, int(stamps.min()))
            self.end_ts = max(self.end_ts, int(stamps.max()))

    def _rebuilt_slots(self) -> np.ndarray:
        slots = np.zeros(self.slot_count, dtype=np.int32)
        for start in range(0, self.count, _CHUNK):
            hashes = self.entries(start, min(start + _CHUNK, self.count))["hash"]
            newest_first = _slots_of(hashes, self.slot_count)[::-1]
            buckets, at = np.unique(newest_first, return_index=True)
            slots[buckets] = start + len(hashes) - at  # the number of each slot's newest entry
        return slots

    def overlaps(self, begin_ms: int, end_ms: int) -> bool:
        """Whether entries stored within [begin_ms, end_ms] may be in this file."""
        return self.count > 0 and self.begin_ts <= end_ms and begin_ms <= self.end_ts

    def walk(self, target: int) -> ChainWalk:
        """Start a lookup of hash `target` (event loop): the entries of its chain still in memory,
        and where the chain goes on among the written entries, for a reader thread to follow."""
        bucket = int(_slots_of(np.array([target]), self.slot_count)[0])
        if self.slots is None:  # the table on disk is current: no entry is in memory
            return ChainWalk(self.path, self._entries_at, HEADER_SIZE + 4 * bucket, -1, self._pending.view()[:0].copy())
        pending = self._pending.view()
        number = int(self.slots[bucket])
        in_memory = []
        while number > self.flushed:
            in_memory.append(number - 1 - self.flushed)
            number = int(pending[in_memory[-1]]["prev"])
        return ChainWalk(self.path, self._entries_at, -1, number, pending[np.array(in_memory, dtype=np.int64)])

    def truncate_at(self, commit_log_offset: int) -> int:
        """Forget entries of messages at or after `commit_log_offset` (recovery); how many stay."""

        def offset_at(i: int) -> int:
            return int(self.entries(i, i + 1)["commit_log_offset"][0])

        if not self.count or offset_at(self.count - 1) < commit_log_offset:
            return self.count
        keep = bisect.bisect_left(range(self.count), commit_log_offset, key=offset_at)
        if keep < self.count:
            if keep < self.flushed:
                with self.path.open("r+b") as file:
                    file.truncate(self._entries_at + keep * INDEX_ENTRY.itemsize)
                    file.seek(0)
                    file.write(HEADER.pack(MAGIC, self.slot_count, 0))
                self._pending.truncate(0)
                self.count = self.flushed = keep
            else:
                self._pending.truncate(keep - self.flushed)
                self.count = keep
            self.slots = self._rebuilt_slots()
        return keep


class IndexService:
    def __init__(self, directory: Path, slots_per_file: int) -> None:
        self.directory = directory
        self.slots_per_file = slots_per_file
        self.files: dict[int, IndexFile] = {}

    def load(self) -> None:
        if not self.directory.is_dir():
            return
        for path in sorted(self.directory.iterdir()):
            if path.name.endswith(".converting"):
                path.unlink()  # a conversion cut short: the original is still there
            elif path.name.isdigit():
                self.files[int(path.name)] = IndexFile.open(path, self.slots_per_file)
        if self.files:
            self.files[max(self.files)].load_slots()  # new entries link in without a read on the loop

    def add(self, segment_start: int, entries: np.ndarray) -> None:
        index_file = self.files.get(segment_start)
        if index_file is None:
            path = self.directory / f"{segment_start:020d}"
            index_file = self.files[segment_start] = IndexFile(segment_start, path, self.slots_per_file)
        index_file.add(entries)

    def truncate_at(self, commit_log_offset: int) -> None:
        """Forget entries of messages at or after `commit_log_offset` (they are dispatched again)."""
        for start, index_file in list(self.files.items()):
            if index_file.truncate_at(commit_log_offset) == 0 and start >= commit_log_offset:
                index_file.path.unlink(missing_ok=True)
                del self.files[start]

    def drop_segments_below(self, min_commit_log_offset: int) -> list[Path]:
        """Forget the index files of deleted segments; returns their paths for the I/O thread to delete."""
        return [self.files.pop(start).path for start in [s for s in self.files if s < min_commit_log_offset]]

    def pending_flushes(self) -> list[tuple[IndexFile, int, np.ndarray]]:
        result = []
        for index_file in self.files.values():
            pending = index_file.pending()
            if pending is not None:
                result.append((index_file, *pending))
        return result

    def tables_to_write(self, *, everything: bool) -> list[tuple[IndexFile, np.ndarray, int]]:
        """Slot tables held in memory that can go to their files: of files whose segment is
        complete (every file but the newest), or all of them when the store stops. Copies, with
        the number of entries each covers; the entries must be written first."""
        newest = max(self.files, default=None)
        return [
            (index_file, index_file.slots.copy(), index_file.count)
            for start, index_file in self.files.items()
            if index_file.slots is not None and (everything or start != newest)
        ]

    @staticmethod
    def tables_written(written: list[tuple[IndexFile, np.ndarray, int]]) -> None:
        """Drop the slot tables now on disk from memory (event loop), unless entries came since."""
        for index_file, _, covered in written:
            if index_file.count == covered:
                index_file.slots = None

    def lookup(self, target: int, begin_ms: int, end_ms: int) -> KeyLookup:
        """A lookup of hash `target` among entries stored within [begin_ms, end_ms] (event loop);
        files whose entries were all stored outside that range are left out, unread."""
        files = [self.files[start] for start in sorted(self.files, reverse=True)]
        walks = tuple(f.walk(target) for f in files if f.overlaps(begin_ms, end_ms))
        return KeyLookup(target, begin_ms, end_ms, walks)
