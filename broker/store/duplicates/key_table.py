"""A fixed-size hash table of 64-bit key hashes and where each key was stored, vectorised with numpy.

The duplicate window (broker/store/duplicates/window.py) looks up and inserts the keys of a whole commit
round at once, so the table works on arrays: open addressing with linear probing, where every probe
step is one numpy operation over all the keys still probing. It holds at most `capacity` entries
in preallocated arrays (about 46 bytes a key, slots and filter included) and is insert-only: the window drops
whole tables, never single keys, so no tombstones are needed and a probe stops at the first empty
slot. A key may be in a table twice when its first copy expired before it was stored again; a
lookup skips copies older than the cutoff it is given. All copies of a key lie between its home
slot and the first empty slot after it, since slots are never emptied.

Most keys looked up are new, and a miss costs a few probe steps in every table, so each table also
has a blocked Bloom filter (at least 16 bits a key; each key sets two bits of one 64-bit word:
about 2% false positives when full) and probes only the keys its filter lets through. The filters
of a window's tables are the rows of one matrix, reused as tables come and go.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from broker.store.duplicates.window_snapshot import TableEntries

U64 = np.uint64
_EMPTY = -1  # a slot without entry; as an entry index it names the sentinel entry, never live
PROBE_WIDTH = 8  # slots looked at per probe step: chains at half load are rarely longer
_STEPS = np.arange(PROBE_WIDTH, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Probe:
    """Hashes to look up, with what every table of one capacity needs to find them."""

    hashes: np.ndarray
    homes: np.ndarray  # home slot
    filter_words: np.ndarray
    filter_bits: np.ndarray  # the two bits the hash sets in its filter word


class TableShape:
    """The sizes shared by the tables of one capacity: slots, and words of their filters."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.slot_bits = max(4, (4 * capacity - 1).bit_length())  # at most a quarter full: short chains
        self.filter_word_bits = max(4, (capacity // 4 - 1).bit_length())  # 16 bits a key or more

    @property
    def filter_words(self) -> int:
        return 1 << self.filter_word_bits

    def probe(self, hashes: np.ndarray) -> Probe:
        one = U64(1)
        return Probe(
            hashes,
            (hashes & U64((1 << self.slot_bits) - 1)).astype(np.int64),
            (hashes >> U64(64 - self.filter_word_bits)).astype(np.int64),  # top bits: not the slot's
            (one << ((hashes >> U64(32)) & U64(63))) | (one << ((hashes >> U64(38)) & U64(63))),
        )

    def probe_one(self, key_hash: int) -> tuple[int, int, int]:
        """(home slot, filter word, filter bits) of one hash, as :meth:`probe` computes them."""
        return (
            key_hash & ((1 << self.slot_bits) - 1),
            key_hash >> (64 - self.filter_word_bits),
            (1 << ((key_hash >> 32) & 63)) | (1 << ((key_hash >> 38) & 63)),
        )


class KeyTable:
    def __init__(self, shape: TableShape, filter_words: np.ndarray) -> None:
        """A table of `shape`; `filter_words` (`shape.filter_words` of them) are cleared and become
        its filter."""
        self.capacity = capacity = shape.capacity
        self._mask = (1 << shape.slot_bits) - 1
        self._slots = np.full(1 << shape.slot_bits, _EMPTY, dtype=np.int32)
        # one more entry than the capacity: the sentinel at index -1, which no cutoff finds live
        self.hashes = np.zeros(capacity + 1, dtype=U64)
        self.timestamps = np.full(capacity + 1, np.iinfo(np.int64).min, dtype=np.int64)
        self.queue_ids = np.empty(capacity + 1, dtype=np.int32)
        self.queue_offsets = np.empty(capacity + 1, dtype=np.int64)
        self.commit_log_offsets = np.empty(capacity + 1, dtype=np.int64)
        self.size = 0
        self.newest_timestamp = -1
        self.filter = filter_words
        self.filter[:] = 0

    @property
    def room(self) -> int:
        return self.capacity - self.size

    @property
    def slots(self) -> np.ndarray:
        return self._slots

    def restore(self, entries: TableEntries, slots: np.ndarray, filter_words: np.ndarray) -> None:
        """Take a saved table whole (an empty table of the same shape): its entries, and the slots and
        filter saved with them, so no key is placed again. Slots or filter bits saved from keys added
        after the entries were (the save reads the live arrays) name entries past `size`, which no
        lookup finds live, or only let more keys probe: both harmless."""
        n = len(entries.hashes)
        self.hashes[:n] = entries.hashes
        self.timestamps[:n] = entries.timestamps
        self.queue_ids[:n] = entries.queue_ids
        self.queue_offsets[:n] = entries.queue_offsets
        self.commit_log_offsets[:n] = entries.commit_log_offsets
        self.size = n
        self.newest_timestamp = int(entries.timestamps.max()) if n else -1
        self._slots = slots.astype(np.int32, copy=False)
        self.filter[:] = filter_words

    def find(self, probe: Probe, cutoff_ms: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows of `probe` whose hash was stored at or after `cutoff_ms`, and their entries."""
        nothing = np.empty(0, dtype=np.int64)
        if not self.size or self.newest_timestamp < cutoff_ms:
            return nothing, nothing
        bits = probe.filter_bits
        rows = np.flatnonzero((np.take(self.filter, probe.filter_words) & bits) == bits)
        found = np.full(len(rows), _EMPTY, dtype=np.int64)
        at = np.arange(len(rows))
        wanted, slots = probe.hashes[rows], probe.homes[rows]
        while len(at):
            entries = self._slots[(slots[:, None] + _STEPS) & self._mask]
            live = (self.hashes[entries] == wanted[:, None]) & (self.timestamps[entries] >= cutoff_ms)
            hit = live.any(axis=1)
            found[at[hit]] = entries[hit, live[hit].argmax(axis=1)]
            going_on = ~hit & (entries != _EMPTY).all(axis=1)
            at, wanted, slots = at[going_on], wanted[going_on], slots[going_on] + PROBE_WIDTH
        hit = found != _EMPTY
        return rows[hit], found[hit]

    def find_one(self, key_hash: int, probe: tuple[int, int, int], cutoff_ms: int) -> int:
        """:meth:`find` for one hash, slot by slot in Python: its entry, or -1."""
        if not self.size or self.newest_timestamp < cutoff_ms:
            return _EMPTY
        slot, word, bits = probe
        if int(self.filter[word]) & bits != bits:
            return _EMPTY
        while (entry := int(self._slots[slot])) != _EMPTY:
            if int(self.hashes[entry]) == key_hash and int(self.timestamps[entry]) >= cutoff_ms:
                return entry
            slot = (slot + 1) & self._mask
        return _EMPTY

    def insert_one(
        self, timestamp: int, key_hash: int, probe: tuple[int, int, int], where: tuple[int, int, int]
    ) -> None:
        """:meth:`insert` for one hash; `where` is (queue id, queue offset, commit log offset)."""
        if not self.room:
            raise ValueError("the table is full")
        entry = self.size
        self.hashes[entry] = key_hash
        self.timestamps[entry] = timestamp
        self.queue_ids[entry], self.queue_offsets[entry], self.commit_log_offsets[entry] = where
        self.size += 1
        self.newest_timestamp = max(self.newest_timestamp, timestamp)
        slot, word, bits = probe
        self.filter[word] = int(self.filter[word]) | bits
        while int(self._slots[slot]) != _EMPTY:
            slot = (slot + 1) & self._mask
        self._slots[slot] = entry

    def insert(
        self,
        timestamp: int | np.ndarray,
        probe: Probe,
        queue_ids: np.ndarray,
        queue_offsets: np.ndarray,
        commit_log_offsets: np.ndarray,
    ) -> None:
        """Add distinct hashes (at most `room` of them), all stored at `timestamp` (or each at its
        own, when a snapshot is restored)."""
        n = len(probe.hashes)
        if n > self.room:
            raise ValueError(f"{n} keys do not fit in the {self.room} entries left")
        first = self.size
        entries = np.arange(first, first + n, dtype=np.int32)
        self.hashes[first : first + n] = probe.hashes
        self.timestamps[first : first + n] = timestamp
        self.queue_ids[first : first + n] = queue_ids
        self.queue_offsets[first : first + n] = queue_offsets
        self.commit_log_offsets[first : first + n] = commit_log_offsets
        self.size += n
        self.newest_timestamp = max(self.newest_timestamp, int(np.max(timestamp)) if n else self.newest_timestamp)
        words, bits = probe.filter_words, probe.filter_bits
        while len(words):  # where keys share a word, one update of it wins: set the others again
            self.filter[words] |= bits
            missing = (self.filter[words] & bits) != bits
            words, bits = words[missing], bits[missing]
        slots = probe.homes
        while len(entries):  # each entry takes the first empty slot of its chain
            free = self._slots[slots] == _EMPTY
            claimed, claimants = slots[free], entries[free]
            self._slots[claimed] = claimants  # where several claim one slot, one of them gets it
            placed = np.zeros(len(entries), dtype=bool)
            placed[free] = self._slots[claimed] == claimants
            entries = entries[~placed]
            slots = (slots[~placed] + 1) & self._mask  # taken, or just taken by another entry
