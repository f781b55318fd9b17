"""Consume queues keep only their tail in memory: reads from disk agree with what was appended."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from broker.store.queues.block_cache import BlockCache
from broker.store.queues.consume_queue import BLOCK_ENTRIES, CQ_ENTRY, ConsumeQueue, read_blocks

ENTRIES_PER_FILE = 1000  # not a multiple of BLOCK_ENTRIES: blocks span files
TOTAL = 5 * BLOCK_ENTRIES + 77


def generated(count: int, start: int = 0) -> np.ndarray:
    """Entries of batches of 10 messages, 100 bytes of log apart, store times 3 ms apart per batch."""
    offsets = np.arange(start, start + count)
    entries = np.zeros(count, dtype=CQ_ENTRY)
    entries["batch_pos"] = offsets // 10 * 100
    entries["row"] = offsets % 10
    entries["size"] = offsets % 200
    entries["tags_code"] = offsets * 7
    entries["store_ts"] = 1_700_000_000_000 + offsets // 10 * 3
    return entries


def flushed_queue(directory: Path, cache: BlockCache, entries: np.ndarray) -> ConsumeQueue:
    queue = ConsumeQueue("T", 0, directory, ENTRIES_PER_FILE, cache)
    for start in range(0, len(entries), 700):  # appended and flushed in pieces, as the store does
        queue.append(start, entries[start : start + 700])
        pending = queue.pending_flush()
        assert pending is not None
        queue.write(pending)
        queue.mark_flushed(pending.first_offset + len(pending.entries))
    return queue


def reopened(directory: Path, cache: BlockCache) -> ConsumeQueue:
    queue = ConsumeQueue("T", 0, directory, ENTRIES_PER_FILE, cache)
    queue.load()
    return queue


@pytest.mark.parametrize("cache_bytes", [1, 64 * 1024 * 1024])
def test_reads_from_disk_and_memory_agree_with_what_was_appended(tmp_path: Path, cache_bytes: int) -> None:
    expected = generated(TOTAL)
    cache = BlockCache(cache_bytes)
    written = flushed_queue(tmp_path, cache, expected)
    written.append(TOTAL, generated(50, TOTAL))  # a tail not flushed yet
    expected = np.concatenate([expected, generated(50, TOTAL)])
    rng = np.random.default_rng(7)
    for queue, length in ((written, len(expected)), (reopened(tmp_path, cache), TOTAL)):
        assert (queue.min_offset, queue.max_offset) == (0, length)
        assert np.array_equal(queue.entries(0, length), expected[:length])
        for start in rng.integers(0, length, 200):
            count = int(rng.integers(0, 3 * BLOCK_ENTRIES))
            assert np.array_equal(queue.entries(int(start), count), expected[start : min(start + count, length)])
        assert queue.entries(length - 1, 5)[0] == expected[length - 1]
        loaded: dict[int, np.ndarray] = {}
        loaded.update({read.block: read.read() for read in queue.gather_blocks(0, length, loaded)})
        assert queue.gather_blocks(0, length, loaded) == []
        assert np.array_equal(queue.entries(0, length, loaded), expected[:length])
    assert cache.size_bytes <= max(cache_bytes, BLOCK_ENTRIES * CQ_ENTRY.itemsize)


def test_only_the_tail_stays_in_memory(tmp_path: Path) -> None:
    queue = flushed_queue(tmp_path, BlockCache(1), generated(TOTAL))
    assert queue.max_offset - queue._tail_start < BLOCK_ENTRIES
    assert queue._tail_start % BLOCK_ENTRIES == 0


def test_searches_over_disk_entries(tmp_path: Path) -> None:
    expected = generated(TOTAL)
    for queue in (flushed_queue(tmp_path / "a", BlockCache(1), expected), reopened(tmp_path / "a", BlockCache(1))):
        for offset in (0, 1, 999, 1000, 1024, 2500, TOTAL - 1):
            stored_at = int(expected["store_ts"][offset])
            assert first_stored_at(queue, stored_at) == offset - offset % 10
            before = offset - offset % 10 - 1
            assert queue.last_offset_before(int(expected["batch_pos"][offset])) == (before if before >= 0 else None)
        assert first_stored_at(queue, 2_000_000_000_000) == TOTAL
        assert first_stored_at(queue, 0) == 0


def first_stored_at(queue: ConsumeQueue, timestamp_ms: int) -> int:
    """The search as the store runs it: in the tail, or by the reader thread's search of the files."""
    found = queue.search("store_ts", timestamp_ms)
    return found if isinstance(found, int) else found.run()


@pytest.mark.parametrize("keep", [0, 10, 1000, 2040, TOTAL - 7])
def test_truncation_reaches_into_entries_on_disk(tmp_path: Path, keep: int) -> None:
    expected = generated(TOTAL)
    cache = BlockCache(64 * 1024 * 1024)
    queue = flushed_queue(tmp_path, cache, expected)
    queue.entries(0, TOTAL)  # every block cached before the cut
    queue.truncate_at_position(int(expected["batch_pos"][keep]) if keep % 10 == 0 else 10**9)
    kept = keep if keep % 10 == 0 else TOTAL
    assert queue.max_offset == kept
    assert np.array_equal(queue.entries(0, TOTAL), expected[:kept])
    again = generated(TOTAL - kept, kept)
    queue.append(kept, again)
    assert np.array_equal(queue.entries(0, TOTAL), expected)
    pending = queue.pending_flush()
    if pending is not None:
        queue.write(pending)
        queue.mark_flushed(queue.max_offset)
    assert np.array_equal(reopened(tmp_path, BlockCache(1)).entries(0, TOTAL), expected)


def test_retention_moves_the_minimum_offset(tmp_path: Path) -> None:
    expected = generated(TOTAL)
    queue = flushed_queue(tmp_path, BlockCache(1), expected)
    queue.drop_below(int(expected["batch_pos"][2100]))
    assert queue.min_offset == 2100
    assert np.array_equal(queue.entries(0, 100), expected[2100:2200])
    queue.delete_files_below(queue.min_offset)
    assert sorted(int(p.name) for p in tmp_path.iterdir()) == [2000, 3000, 4000, 5000]
    again = reopened(tmp_path, BlockCache(1))
    assert (again.min_offset, again.max_offset) == (2000, TOTAL)
    assert np.array_equal(again.entries(2100, TOTAL), expected[2100:])


def test_blocks_read_together_off_the_loop_are_each_blocks_entries(tmp_path: Path) -> None:
    """`read_blocks` reads consecutive blocks of one queue in one go (across file ends): each block
    still gets exactly its own entries, and blocks of another queue in between start a new read."""
    first = generated(TOTAL)
    second = generated(3 * BLOCK_ENTRIES, 10_000)
    cache = BlockCache(1)  # nothing stays cached: every block is read
    queue_a = flushed_queue(tmp_path / "a", cache, first)
    queue_b = flushed_queue(tmp_path / "b", cache, second)
    reads_a = queue_a.gather_blocks(0, TOTAL, {})
    reads_b = queue_b.gather_blocks(0, len(second), {})
    mixed = [*reads_a[:3], reads_b[0], *reads_a[3:], *reads_b[1:]]
    for read, entries in zip(mixed, read_blocks(mixed), strict=True):
        source = first if read in reads_a else second
        assert np.array_equal(entries, source[read.start : read.end])
