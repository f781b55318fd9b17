"""Duplicate detection: the UNIQ_KEYs stored within `duplicateWindowSeconds`, with where they went.

A send whose UNIQ_KEY (for its topic) was stored within the window is not stored again (see
docs/protocol.md, "Duplicate sends"). Keys are hashed to 64 bits together with their topic
(:mod:`rocketspark.message.stable_hashes`, numpy over the Arrow string buffers), so an Arrow batch
of 10,000 rows is looked up and added without per-row Python. The window is kept as generations,
one per group commit round: a dict maps each hash to (generation, row), and a generation's arrays
hold the rows' positions. Generations older than the window, or beyond `duplicateWindowMaxKeys`
keys, are dropped; entries of dropped generations are ignored on lookup and swept from the dict
when they outnumber the live ones.

Internal topics are never deduplicated: retry, dead-letter and schedule topics re-store a message
with its UNIQ_KEY on purpose.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketspark.message.stable_hashes import GOLDEN, U64, binary_hashes, mix64

_ROW_BITS = 32


def deduplicated_topic(topic: str) -> bool:
    """Whether sends to `topic` are checked for duplicates (user topics only)."""
    return not (topic.startswith("%") or topic.startswith("rmq_sys_") or topic == "SCHEDULE_TOPIC_XXXX")


def key_hashes(topic: str, keys: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """64-bit hashes of `topic` + each key, and the mask of rows that have a key (rows without one
    hash to 0)."""
    keys = keys.cast(pa.string())
    present = pc.fill_null(pc.not_equal(pc.fill_null(keys, ""), ""), False).to_numpy(zero_copy_only=False)
    result = np.zeros(len(keys), dtype=U64)
    if not present.any():
        return result, present
    topic_hash = binary_hashes(pa.array([topic], pa.string()))[0][0]
    with np.errstate(over="ignore"):
        result[present] = mix64(binary_hashes(keys)[0] ^ (topic_hash * U64(GOLDEN)))[present]
    return result, present


@dataclass(frozen=True, slots=True)
class StoredAt:
    """Where the first copy of a key was stored."""

    queue_id: int
    queue_offset: int
    commit_log_offset: int


@dataclass(slots=True)
class _Generation:
    number: int
    store_timestamp: int
    hashes: np.ndarray  # uint64
    queue_ids: np.ndarray
    queue_offsets: np.ndarray
    commit_log_offsets: np.ndarray


class DuplicateWindow:
    def __init__(self, window_seconds: int, max_keys: int) -> None:
        self.window_ms = window_seconds * 1000
        self.max_keys = max_keys
        self._where: dict[int, int] = {}  # hash -> generation number << 32 | row
        self._generations: deque[_Generation] = deque()
        self._live_keys = 0
        self._next_generation = 0

    @property
    def enabled(self) -> bool:
        return self.window_ms > 0

    def __len__(self) -> int:
        return self._live_keys

    def lookup(self, hashes: np.ndarray, now_ms: int) -> dict[int, StoredAt]:
        """The hashes (as ints) among `hashes` stored within the window, with their first copy."""
        self.expire(now_ms)
        if not self._where or not len(hashes):
            return {}
        where = self._where
        hits = {h: where[h] for h in filter(where.__contains__, hashes.tolist())}  # C-level scan
        if not hits:
            return {}
        oldest = self._generations[0].number if self._generations else self._next_generation
        cutoff = now_ms - self.window_ms
        found: dict[int, StoredAt] = {}
        for h, code in hits.items():
            number, row = code >> _ROW_BITS, code & ((1 << _ROW_BITS) - 1)
            if number < oldest:
                continue
            generation = self._generations[number - oldest]
            if generation.store_timestamp < cutoff:
                continue
            found[h] = StoredAt(
                int(generation.queue_ids[row]),
                int(generation.queue_offsets[row]),
                int(generation.commit_log_offsets[row]),
            )
        return found

    def add(
        self,
        store_timestamp: int,
        hashes: np.ndarray,
        queue_ids: np.ndarray,
        queue_offsets: np.ndarray,
        commit_log_offsets: np.ndarray,
    ) -> None:
        """Remember stored rows (of one round) that carry a key; a later lookup finds the first copy."""
        if not len(hashes):
            return
        number = self._next_generation
        self._next_generation += 1
        self._generations.append(
            _Generation(number, store_timestamp, hashes, queue_ids, queue_offsets, commit_log_offsets)
        )
        codes = np.arange(len(hashes), dtype=np.int64) + (number << _ROW_BITS)
        self._where.update(zip(hashes.tolist(), codes.tolist(), strict=True))
        self._live_keys += len(hashes)
        self._trim()

    def expire(self, now_ms: int) -> None:
        cutoff = now_ms - self.window_ms
        while self._generations and self._generations[0].store_timestamp < cutoff:
            self._drop_oldest()
        self._sweep()

    def _trim(self) -> None:
        while self._live_keys > self.max_keys and len(self._generations) > 1:
            self._drop_oldest()
        self._sweep()

    def _drop_oldest(self) -> None:
        self._live_keys -= len(self._generations.popleft().hashes)

    def _sweep(self) -> None:
        """Rebuild the dict from the live generations once dropped entries outnumber live ones."""
        if len(self._where) <= 2 * self._live_keys + 1024:
            return
        self._where = {}
        for generation in self._generations:
            codes = np.arange(len(generation.hashes), dtype=np.int64) + (generation.number << _ROW_BITS)
            self._where.update(zip(generation.hashes.tolist(), codes.tolist(), strict=True))

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
            hashes, present = key_hashes(topic, keys)
            rows = rows[present]
            hashes = hashes[present]
            unique, first = np.unique(hashes, return_index=True)
            rows = rows[first]
            fresh = np.array([h not in self._where for h in unique.tolist()], dtype=bool)
            rows, unique = rows[fresh], unique[fresh]
            self.add(
                int(store_ts[rows].max()) if len(rows) else now_ms,
                unique,
                batch.column("queue_id").to_numpy()[rows],
                batch.column("queue_offset").to_numpy()[rows],
                batch.column("commit_log_offset").to_numpy()[rows],
            )


def stored_uniq_keys(properties: pa.Array) -> pa.Array:
    """The UNIQ_KEY of stored messages, from their encoded properties (null where none)."""
    matched = pc.extract_regex(properties, "(?:^|\x02)UNIQ_KEY\x01(?P<key>[^\x02]*)")
    return pc.struct_field(matched, "key")
