"""Index of messages by key, for QUERY_MESSAGE: `topic#key` for every KEYS token and the msgId.

As RocketMQ's IndexFile, the index holds the Java `String.hashCode` of `topic#key` with the
message's commit log offset and store time; a lookup collects candidates by hash and the caller
checks the real keys. Entries are kept per commit log segment (one file each, deleted with the
segment), built per stored batch with pyarrow/numpy.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker.store.growable import GrowableArray
from rocketspark.message.hashing import java_string_hash, java_string_hash_array

log = logging.getLogger(__name__)

INDEX_ENTRY = np.dtype([("hash", "<i8"), ("commit_log_offset", "<i8"), ("store_ts", "<i8")])


#: the columns of a stored batch that its index entries are built from
INDEXED_COLUMNS = ["topic", "keys", "msg_id", "commit_log_offset", "store_timestamp"]


def index_entries(batch: pa.RecordBatch) -> np.ndarray:
    """The index entries of stored messages (all columns, or INDEXED_COLUMNS): each KEYS token
    and the msgId, per message."""
    keys = pc.split_pattern(pc.fill_null(batch.column("keys"), ""), " ")
    tokens = pc.list_flatten(keys)
    parents = pc.list_parent_indices(keys)
    present = pc.not_equal(tokens, "")
    tokens, parents = pc.filter(tokens, present), pc.filter(parents, present)
    rows = pa.concat_arrays([parents.cast(pa.int64()), pa.array(np.arange(batch.num_rows, dtype=np.int64))])
    names = pa.concat_arrays([tokens, batch.column("msg_id")])
    joined = pc.binary_join_element_wise(pc.take(batch.column("topic"), rows), names, "#")
    entries = np.empty(len(rows), dtype=INDEX_ENTRY)
    row_numbers = rows.to_numpy()
    entries["hash"] = java_string_hash_array(joined)
    entries["commit_log_offset"] = batch.column("commit_log_offset").to_numpy()[row_numbers]
    entries["store_ts"] = batch.column("store_timestamp").to_numpy()[row_numbers]
    return entries


@dataclass(eq=False)
class IndexFile:
    """The index entries of one commit log segment."""

    segment_start: int
    path: Path
    entries: GrowableArray
    flushed: int = 0  # entries written to the file

    def pending(self) -> tuple[int, np.ndarray] | None:
        if self.flushed >= len(self.entries):
            return None
        return self.flushed, self.entries.view()[self.flushed :].copy()


class IndexService:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.files: dict[int, IndexFile] = {}

    def load(self) -> None:
        if not self.directory.is_dir():
            return
        for path in sorted(self.directory.iterdir()):
            if path.name.isdigit():
                data = np.fromfile(path, dtype=np.uint8)
                whole = len(data) // INDEX_ENTRY.itemsize
                entries = GrowableArray(INDEX_ENTRY, max(whole, 1024))
                entries.append(data[: whole * INDEX_ENTRY.itemsize].view(INDEX_ENTRY))
                self.files[int(path.name)] = IndexFile(int(path.name), path, entries, whole)

    def add(self, segment_start: int, entries: np.ndarray) -> None:
        index_file = self.files.get(segment_start)
        if index_file is None:
            index_file = IndexFile(segment_start, self.directory / f"{segment_start:020d}", GrowableArray(INDEX_ENTRY))
            self.files[segment_start] = index_file
        index_file.entries.append(entries)

    def truncate_at(self, commit_log_offset: int) -> None:
        """Forget entries of messages at or after `commit_log_offset` (they are dispatched again)."""
        for start, index_file in list(self.files.items()):
            offsets = index_file.entries.view()["commit_log_offset"]
            keep = int(np.count_nonzero(offsets < commit_log_offset))
            if keep < len(offsets):
                index_file.entries.truncate(keep)
                index_file.flushed = min(index_file.flushed, keep)
                if index_file.path.exists():
                    os.truncate(index_file.path, keep * INDEX_ENTRY.itemsize)
            if keep == 0 and start >= commit_log_offset:
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

    @staticmethod
    def write(index_file: IndexFile, first: int, entries: np.ndarray) -> None:
        """Append entries to the file and fsync it (I/O thread)."""
        index_file.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(index_file.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, entries.tobytes(), first * INDEX_ENTRY.itemsize)
            os.fsync(fd)
        finally:
            os.close(fd)

    def lookup(self, topic: str, key: str, begin_ms: int, end_ms: int, limit: int) -> list[int]:
        """Commit log offsets of candidate messages (newest first), by hash only."""
        target = java_string_hash(f"{topic}#{key}")
        found: list[int] = []
        for start in sorted(self.files, reverse=True):
            entries = self.files[start].entries.view()
            mask = (entries["hash"] == target) & (entries["store_ts"] >= begin_ms) & (entries["store_ts"] <= end_ms)
            found.extend(int(o) for o in entries["commit_log_offset"][mask][::-1])
            if len(found) >= limit:
                break
        return found
