"""Deterministic message ids for the sink's idempotent writes (docs/spark.md, "Idempotent writes").

A row's UNIQ_KEY is a function of its scope (query id and batch id of a streaming write, or
`txnAppId` and `txnVersion` of a batch write), its partition, its content (topic, body, keys, tags,
properties) and its occurrence number among the rows of identical content the task wrote before it.
Spark computes the same rows into the same partitions on every replay of a batch (maybe in another
order), so a replay sends the same ids.

Everything is vectorised with numpy over a whole Arrow batch. Each byte string is hashed with a
multilinear hash (the sum of its bytes times per-position 64-bit keys, modulo 2^64, then a
splitmix64 finaliser), twice with independent keys: 128 bits of content hash per row.

An id keeps the shape of RocketMQ's UNIQ_KEY (32 hex digits, which consumers deduplicate by): 10
bytes of hash, the 4-byte time field (milliseconds since the month began in Java's ids) and 2 more
bytes of hash, so 96 bits tell rows apart. The time field is always 0, the start of the month: an id
must be the same wherever and whenever a task computes it, and no clock reading is (a batch's
timestamp is in the streaming checkpoint's offset log, which an executor on another host may not
reach, and months start at other moments in other time zones). Java's lookups by id, which search
from the id's time on, then search from the start of the current month.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from rocketspark.message.batches.stable_hashes import GOLDEN, KEY_SEEDS, NULL_HASH, U64, binary_hashes, mix64
from rocketspark.message.ids import hex_rows


def _map_hashes(array: pa.MapArray) -> tuple[np.ndarray, np.ndarray]:
    """Two hashes of each map of a map<string,string> array: the sum of its entries' hashes (so the
    entries' order does not matter), mixed."""
    bounds = np.asarray(array.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    first, count = int(bounds[0]), int(bounds[-1] - bounds[0])
    key_hashes = binary_hashes(array.keys.slice(first, count))
    value_hashes = binary_hashes(array.items.slice(first, count))
    results = []
    for which in (0, 1):
        with np.errstate(over="ignore"):
            entries = mix64(key_hashes[which] * U64(GOLDEN) + value_hashes[which])
            totals = np.zeros(count + 1, dtype=U64)
            np.cumsum(entries, out=totals[1:])
            sums = mix64(totals[bounds[1:] - first] - totals[bounds[:-1] - first] + np.diff(bounds).astype(U64))
        if array.null_count:
            sums[np.asarray(array.is_null().to_numpy(zero_copy_only=False))] = NULL_HASH
        results.append(sums)
    return results[0], results[1]


def content_hashes(rows: pa.RecordBatch, topics: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Two 64-bit hashes of each row's content: topic, body, keys, tags and properties of a
    PRODUCER_SCHEMA batch, with each row's topic in `topics`."""
    parts = [
        binary_hashes(topics),
        binary_hashes(rows.column("body")),
        binary_hashes(rows.column("keys")),
        binary_hashes(rows.column("tags")),
        _map_hashes(rows.column("properties")),
    ]
    combined = []
    for which in (0, 1):
        h = np.full(rows.num_rows, KEY_SEEDS[which], dtype=U64)
        for part in parts:
            with np.errstate(over="ignore"):
                h = mix64(h * U64(GOLDEN) ^ part[which])
        combined.append(h)
    return combined[0], combined[1]


def _scope_words(*parts: object) -> tuple[int, int]:
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=16).digest()
    return int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:], "big")


@dataclass
class IdScope:
    """The ids of one task: what the rows' ids are unique within, and the occurrences seen so far."""

    scope: tuple[object, ...]  # (query id, batch id) or (txnAppId, txnVersion)
    partition: int
    _words: tuple[int, int] = (0, 0)
    #: the content hashes seen so far and how often, as sorted runs (each hash in one), the newest
    #: last and at most half as long as the one before: a batch looks its rows up in every run and
    #: adds one, and runs merge as a binary counter's digits carry, so a task of n rows sorts each
    #: hash O(log n) times, not once per later batch
    _runs: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._words = _scope_words(*self.scope, self.partition)

    def occurrences(self, hashes: np.ndarray) -> np.ndarray:
        """Each row's number among the task's rows of the same content hash (0 for the first),
        counting the rows of earlier calls; remembers this call's rows."""
        n = len(hashes)
        order = np.argsort(hashes, kind="stable")
        ordered = hashes[order]
        starts = np.ones(n, dtype=bool)
        starts[1:] = ordered[1:] != ordered[:-1]
        group_start = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
        ranks = np.empty(n, dtype=np.int64)
        ranks[order] = np.arange(n) - group_start
        unique, counts = ordered[starts], np.diff(np.append(np.flatnonzero(starts), n)).astype(np.int64)
        row_unique = np.empty(n, dtype=np.int64)  # each row's index in `unique`
        row_unique[order] = np.cumsum(starts) - 1
        prior = np.zeros(len(unique), dtype=np.int64)  # each hash's rows in earlier calls
        new = np.ones(len(unique), dtype=bool)
        for seen, seen_counts in self._runs:  # sorted needles: the lookups walk each run once
            at = np.clip(np.searchsorted(seen, unique), 0, len(seen) - 1)
            old = seen[at] == unique
            prior[old] = seen_counts[at[old]]
            seen_counts[at[old]] += counts[old]
            new &= ~old
        if new.any():
            self._runs.append((unique[new], counts[new]))
        while len(self._runs) > 1 and len(self._runs[-2][0]) <= 2 * len(self._runs[-1][0]):
            (low, low_counts), (high, high_counts) = self._runs.pop(), self._runs.pop()
            positions = np.searchsorted(high, low)  # both sorted, no hash in both: a merge, no sort
            self._runs.append((np.insert(high, positions, low), np.insert(high_counts, positions, low_counts)))
        return prior[row_unique] + ranks

    def ids(self, rows: pa.RecordBatch, topics: pa.Array) -> tuple[pa.Array, np.ndarray]:
        """(the rows' ids as a string array, a 64-bit hash of each id to choose its queue by)."""
        first, second = content_hashes(rows, topics)
        occurrence = self.occurrences(first).astype(U64)
        with np.errstate(over="ignore"):
            high = mix64((first ^ U64(self._words[0])) + occurrence * U64(GOLDEN))
            low = mix64((second ^ U64(self._words[1])) + occurrence * U64(KEY_SEEDS[0] | 1))
        n = rows.num_rows
        packed = np.empty((n, 16), dtype=np.uint8)
        packed[:, :8] = high.astype(">u8").view(np.uint8).reshape(n, 8)
        packed[:, 8:10] = low.astype(">u8").view(np.uint8).reshape(n, 8)[:, :2]
        packed[:, 10:14] = 0  # the time field, see the module's docstring
        packed[:, 14:] = low.astype(">u8").view(np.uint8).reshape(n, 8)[:, 2:4]
        return hex_rows(packed), high
