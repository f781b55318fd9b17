"""Duplicate detection: the UNIQ_KEYs stored within `duplicateWindowSeconds`, with where they went.

A send whose UNIQ_KEY (for its topic) was stored within the window is not stored again (see
docs/protocol.md, "Duplicate sends"). The commit log writer checks a whole commit round at once: the
keys of all its sends are hashed to 64 bits together with their topic
(:mod:`rocketspark.message.batches.stable_hashes`, numpy over the Arrow string buffers) and looked up in
numpy hash tables (:mod:`broker.store.duplicates.key_table`), so no step runs Python per row. Two different
keys share a 64-bit hash with a probability of about n^2 / 2^65 for n keys in the window (3e-8 at
a million): then the second is taken for a duplicate.

Internal topics are never deduplicated: retry, dead-letter and schedule topics re-store a message
with its UNIQ_KEY on purpose.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker.store.duplicates.key_table import KeyTable, TableShape
from broker.store.duplicates.window_snapshot import TableEntries, WindowSnapshot
from broker.store.log.commitlog import CommitLog
from rocketspark.message.batches.stable_hashes import (
    GOLDEN,
    MASK64,
    U64,
    binary_hash_and_lengths,
    bytes_hash,
    mix64,
    mix64_int,
)

log = logging.getLogger(__name__)

#: a window shorter than configured is reported at most once in this many ms (of store time)
SHORT_WINDOW_WARNING_INTERVAL_MS = 60_000
_RECOVERED_COLUMNS = ["topic", "queue_id", "queue_offset", "commit_log_offset", "store_timestamp", "properties"]


def deduplicated_topic(topic: str) -> bool:
    """Whether sends to `topic` are checked for duplicates (user topics only: each send of a half
    message is a half message of its own, ended by its own handle)."""
    return not (
        topic.startswith("%")
        or topic.startswith("rmq_sys_")
        or topic in ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC")
    )


def key_hashes(
    topics: Sequence[str], counts: Sequence[int] | np.ndarray, keys: pa.Array
) -> tuple[np.ndarray, np.ndarray]:
    """64-bit hashes of topic + key for the rows of several sends at once, and the mask of the rows
    that have a key. `keys` holds the keys of every send in turn; send i has counts[i] rows, all
    for topics[i]."""
    hashed, lengths = binary_hash_and_lengths(keys)
    present = lengths > 0
    if keys.null_count:
        present &= keys.is_valid().to_numpy(zero_copy_only=False)
    per_send = np.fromiter((_topic_hash(t) for t in topics), dtype=U64, count=len(topics))
    with np.errstate(over="ignore"):
        hashes = mix64(hashed ^ (np.repeat(per_send, counts) * U64(GOLDEN)))
    return hashes, present


def key_hash(topic: str, key: str) -> int:
    """:func:`key_hashes` of one key, in Python integers."""
    return mix64_int(bytes_hash(key.encode()) ^ ((_topic_hash(topic) * GOLDEN) & MASK64))


@lru_cache(maxsize=4096)
def _topic_hash(topic: str) -> int:
    return bytes_hash(topic.encode())


@dataclass(frozen=True, slots=True)
class StoredAt:
    """Where the first copy of a key was stored."""

    queue_id: int
    queue_offset: int
    commit_log_offset: int


@dataclass(frozen=True, slots=True)
class Found:
    """The answer of a lookup: which hashes were stored within the window, and where."""

    hit: np.ndarray  # bool, one per hash looked up
    queue_ids: np.ndarray  # the rest: valid where `hit`
    queue_offsets: np.ndarray
    commit_log_offsets: np.ndarray

    def at(self, row: int) -> StoredAt:
        return StoredAt(int(self.queue_ids[row]), int(self.queue_offsets[row]), int(self.commit_log_offsets[row]))


class DuplicateWindow:
    """The keys of all topics stored within `window_seconds`, as far as the newest `max_keys` reach.

    Keys live in a few :class:`KeyTable` generations of `max_keys / GENERATIONS` keys each, filled
    in turn; the oldest is dropped once there are more than GENERATIONS full ones, or once its
    newest key left the window. So between `max_keys` and 1.5 x `max_keys` keys are kept, in
    about 60 bytes each (91 MB measured at 1.5 million), and a lookup probes the three generations
    with vectorised steps. When keys come faster than `max_keys` per `window_seconds`, a generation
    is dropped before its keys' time is up: the window is then shorter than configured, which the
    broker logs as a WARNING, at most once per SHORT_WINDOW_WARNING_INTERVAL_MS.
    """

    GENERATIONS = 2

    def __init__(self, window_seconds: int, max_keys: int) -> None:
        self.window_ms = window_seconds * 1000
        self.max_keys = max_keys
        self._shape = TableShape(max(1, -(-max_keys // self.GENERATIONS)))
        self._tables: deque[KeyTable] = deque()
        # row i: the filter of the table made i-th, modulo the number of rows
        self._filters = np.zeros((self.GENERATIONS + 1, self._shape.filter_words), dtype=U64)
        self._made = 0
        self._warned_at_ms: int | None = None
        self._dropped_early = 0  # keys dropped before their time since the last warning
        self._saved_through = -1  # the commit log end of the last snapshot written

    @property
    def enabled(self) -> bool:
        return self.window_ms > 0

    def __len__(self) -> int:
        return sum(table.size for table in self._tables)

    def lookup(self, hashes: np.ndarray, now_ms: int) -> Found:
        """Which of `hashes` were stored within the window, with their first copy."""
        cutoff = now_ms - self.window_ms
        while self._tables and self._tables[0].newest_timestamp < cutoff:
            self._tables.popleft()
        n = len(hashes)
        found = Found(np.zeros(n, dtype=bool), np.zeros(n, np.int32), np.zeros(n, np.int64), np.zeros(n, np.int64))
        if not self._tables or not n:
            return found
        probe = self._shape.probe(hashes)
        for table in self._tables:
            rows, entries = table.find(probe, cutoff)
            if len(rows):
                found.hit[rows] = True
                found.queue_ids[rows] = table.queue_ids[entries]
                found.queue_offsets[rows] = table.queue_offsets[entries]
                found.commit_log_offsets[rows] = table.commit_log_offsets[entries]
        return found

    def add(
        self,
        store_timestamp: int,
        hashes: np.ndarray,
        queue_ids: np.ndarray,
        queue_offsets: np.ndarray,
        commit_log_offsets: np.ndarray,
    ) -> None:
        """Remember distinct keys not in the window, stored at `store_timestamp`."""
        done = 0
        while done < len(hashes):
            table = self._table_with_room(store_timestamp)
            part = slice(done, done + min(table.room, len(hashes) - done))
            probe = self._shape.probe(hashes[part])
            table.insert(store_timestamp, probe, queue_ids[part], queue_offsets[part], commit_log_offsets[part])
            done = part.stop

    def _table_with_room(self, now_ms: int) -> KeyTable:
        if not self._tables or not self._tables[-1].room:
            if len(self._tables) == self.GENERATIONS + 1:
                self._drop_oldest(now_ms)  # its filter is the one the new table takes
            self._tables.append(KeyTable(self._shape, self._filters[self._made % (self.GENERATIONS + 1)]))
            self._made += 1
        return self._tables[-1]

    def _drop_oldest(self, now_ms: int) -> None:
        """Make room for newer keys; warn when the oldest generation's time is not up yet."""
        oldest = self._tables.popleft()
        held_ms = now_ms - oldest.newest_timestamp  # how long its newest key was held
        if held_ms >= self.window_ms:
            return
        self._dropped_early += oldest.size
        if self._warned_at_ms is not None and now_ms - self._warned_at_ms < SHORT_WINDOW_WARNING_INTERVAL_MS:
            return
        log.warning(
            "duplicate window shorter than configured: keys leave it as soon as %.1f s after they were stored, "
            "not after duplicateWindowSeconds=%d, because duplicateWindowMaxKeys=%d newer keys (of all topics) "
            "were stored meanwhile; a resend later than that is stored again. %s keys left early since the last "
            "warning (at most one a minute); raise duplicateWindowMaxKeys (about 60 bytes a key) to keep them",
            held_ms / 1000,
            self.window_ms // 1000,
            self.max_keys,
            f"{self._dropped_early:,}",
        )
        self._warned_at_ms = now_ms
        self._dropped_early = 0

    def lookup_one(self, key_hash: int, now_ms: int) -> StoredAt | None:
        """:meth:`lookup` of one hash, in Python (a small round's few keys): where it was stored."""
        cutoff = now_ms - self.window_ms
        while self._tables and self._tables[0].newest_timestamp < cutoff:
            self._tables.popleft()
        probe = self._shape.probe_one(key_hash)
        for table in reversed(self._tables):  # as lookup, where a later table's hit wins
            entry = table.find_one(key_hash, probe, cutoff)
            if entry >= 0:
                return StoredAt(
                    int(table.queue_ids[entry]), int(table.queue_offsets[entry]), int(table.commit_log_offsets[entry])
                )
        return None

    def add_one(self, store_timestamp: int, key_hash: int, where: tuple[int, int, int]) -> None:
        """:meth:`add` of one hash not in the window; `where`: (queue id, queue offset, commit log offset)."""
        table = self._table_with_room(store_timestamp)
        table.insert_one(store_timestamp, key_hash, self._shape.probe_one(key_hash), where)

    def snapshot(self, through: int) -> WindowSnapshot:
        """The window as it is (event loop, between rounds): it holds the keys of every record
        before `through`, the commit log's end. Views of the tables' filled parts, which never change."""
        tables = [
            TableEntries(
                t.hashes[: t.size],
                t.timestamps[: t.size],
                t.queue_ids[: t.size],
                t.queue_offsets[: t.size],
                t.commit_log_offsets[: t.size],
                t.slots,
                t.filter,
            )
            for t in list(self._tables)
        ]
        return WindowSnapshot(through, self.window_ms, self._shape.capacity, tables)

    async def save(self, through: int, path: Path) -> None:
        """Write a snapshot to `path` (from the event loop, written on a thread) unless the window
        is off or nothing was stored since the last one; `through`: the commit log's end."""
        if not self.enabled or through == self._saved_through:
            return
        await asyncio.to_thread(self.snapshot(through).save, path)
        self._saved_through = through

    def recover(self, commit_log: CommitLog, end: int, path: Path) -> None:
        """At startup (blocking: the store's recovery runs in its I/O thread): restore the window
        from its snapshot, less keys whose records the log lost, and add the keys of the records
        after it; without a usable snapshot, read the records stored within the window."""
        if not self.enabled:
            return
        now = int(time.time() * 1000)
        saved = WindowSnapshot.load(path)
        if saved is not None and saved.capacity != self._shape.capacity:
            log.info("duplicate window snapshot %s was taken with other duplicateWindowMaxKeys; not used", path)
            saved = None
        if saved is None:
            self._read_recent(commit_log, end, now)
            return
        for entries in (t.below(end) for t in saved.tables):
            if len(entries.hashes) and int(entries.timestamps.max()) >= now - self.window_ms:
                table = KeyTable(self._shape, self._filters[self._made % (self.GENERATIONS + 1)])
                self._made += 1
                if entries.slots is not None and entries.filter is not None:
                    table.restore(entries, entries.slots, entries.filter)
                else:
                    probe = self._shape.probe(entries.hashes)
                    table.insert(
                        entries.timestamps, probe, entries.queue_ids, entries.queue_offsets, entries.commit_log_offsets
                    )
                self._tables.append(table)
        if saved.through > end:  # records it vouched for were lost: later ones will take their place
            path.unlink()
        positions = commit_log.batches_between(max(saved.through, commit_log.min_offset), end)
        for _, stored in commit_log.arrow_batches(positions):
            self.add_stored_batch(stored.select(_RECOVERED_COLUMNS), now)
        log.info("duplicate window: %d keys from its snapshot and %d records after it", len(self), len(positions))

    def _read_recent(self, commit_log: CommitLog, end: int, now: int) -> None:
        """Rebuild the window from the commit log's records stored within it, newest first, up
        to `max_keys` rows, a segment at a time."""
        cutoff = now - self.window_ms
        recent: list[pa.RecordBatch] = []
        rows = 0
        for stored in _newest_first(commit_log, end):
            batch = stored.select(_RECOVERED_COLUMNS)
            if not batch.num_rows or int(pc.max(batch.column("store_timestamp")).as_py()) < cutoff:
                break
            recent.append(batch)
            rows += batch.num_rows
            if rows >= self.max_keys:
                break
        for batch in reversed(recent):
            self.add_stored_batch(batch, now)
        if recent:
            log.info("duplicate window: %d keys from %d recent batches", len(self), len(recent))

    def add_stored_batch(self, batch: pa.RecordBatch, now_ms: int) -> None:
        """Recovery: remember the keyed rows of a stored batch stored within the window."""
        store_ts = batch.column("store_timestamp").to_numpy()
        if not len(store_ts) or int(store_ts.max()) < now_ms - self.window_ms:
            return
        topics = batch.column("topic").dictionary_encode()
        names = topics.dictionary.to_pylist()
        indices = topics.indices.to_numpy()
        for number, topic in enumerate(names):
            if not deduplicated_topic(topic):
                continue
            rows = np.flatnonzero(indices == number)
            keys = stored_uniq_keys(batch.column("properties").take(pa.array(rows)))
            hashes, present = key_hashes([topic], [len(rows)], keys)
            rows, hashes = rows[present], hashes[present]
            hashes, first = np.unique(hashes, return_index=True)
            rows = rows[first]
            fresh = ~self.lookup(hashes, now_ms).hit
            rows, hashes = rows[fresh], hashes[fresh]
            if len(rows):
                self.add(
                    int(store_ts[rows].max()),
                    hashes,
                    batch.column("queue_id").to_numpy()[rows],
                    batch.column("queue_offset").to_numpy()[rows],
                    batch.column("commit_log_offset").to_numpy()[rows],
                )


def _newest_first(commit_log: CommitLog, end: int) -> Iterator[pa.RecordBatch]:
    """The commit log's batches before `end`, newest first, listed a segment at a time (blocking)."""
    for segment in reversed(commit_log.segments):
        positions = list(segment.record_starts(segment.start, end))
        for _, stored in commit_log.arrow_batches(positions[::-1]):
            yield stored


def stored_uniq_keys(properties: pa.Array) -> pa.Array:
    """The UNIQ_KEY of stored messages, from their encoded properties (null where none)."""
    matched = pc.extract_regex(properties, "(?:^|\x02)UNIQ_KEY\x01(?P<key>[^\x02]*)")
    return pc.struct_field(matched, "key")
