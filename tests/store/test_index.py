"""Index files with hash slots: lookups find what a scan of all entries finds, in memory, on disk,
after a clean close, after a crash (slot table not written), after truncation, and in files of the
format before hash slots."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from broker.store.queues.index import INDEX_ENTRY, LEGACY_ENTRY, IndexFile, IndexService

SLOTS = 1024
COUNT = 20_000
SEGMENT = 0


def generated(count: int, seed: int = 1) -> np.ndarray:
    """Entries in commit log order whose hashes repeat (several entries per key, many per slot)."""
    rng = np.random.default_rng(seed)
    entries = np.zeros(count, dtype=INDEX_ENTRY)
    entries["hash"] = rng.integers(-3000, 3000, count) * 104_729
    entries["commit_log_offset"] = np.arange(count) * 3
    entries["store_ts"] = 1_700_000_000_000 + np.arange(count)
    return entries


def scanned(entries: np.ndarray, target: int, begin: int = 0, end: int = 2**62) -> list[int]:
    """What a lookup must answer: a scan, newest first."""
    hit = (entries["hash"] == target) & (entries["store_ts"] >= begin) & (entries["store_ts"] <= end)
    return [int(o) for o in entries["commit_log_offset"][hit][::-1]]


def looked_up(service: IndexService, target: int, begin: int = 0, end: int = 2**62, limit: int = 10**6) -> list[int]:
    return service.lookup(target, begin, end).offsets(limit)


def filled(directory: Path, entries: np.ndarray, *, flush_every: int = 7_000) -> IndexService:
    service = IndexService(directory, SLOTS)
    for start in range(0, len(entries), 1_000):
        service.add(SEGMENT, entries[start : start + 1_000])
        if (start + 1_000) % flush_every == 0:
            for index_file, first, pending in service.pending_flushes():
                index_file.write(first, pending)
                index_file.mark_flushed(first + len(pending))
    return service


def reopened(directory: Path) -> IndexService:
    service = IndexService(directory, SLOTS)
    service.load()
    return service


def targets(entries: np.ndarray) -> list[int]:
    return [int(h) for h in entries["hash"][::997]] + [12345]


def test_lookups_agree_with_a_scan_in_memory_and_on_disk(tmp_path: Path) -> None:
    entries = generated(COUNT)
    service = filled(tmp_path, entries)  # part written, part pending
    index_file = service.files[SEGMENT]
    assert 0 < index_file.flushed < index_file.count == COUNT
    for target in targets(entries):
        assert looked_up(service, target) == scanned(entries, target)
    begin, end = 1_700_000_005_000, 1_700_000_012_000
    assert looked_up(service, int(entries["hash"][6000]), begin, end) == scanned(
        entries, int(entries["hash"][6000]), begin, end
    )


@pytest.mark.parametrize("closed_cleanly", [True, False])
def test_reopened_files_answer_the_same(tmp_path: Path, closed_cleanly: bool, caplog: pytest.LogCaptureFixture) -> None:
    entries = generated(COUNT)
    service = filled(tmp_path, entries, flush_every=1_000)
    if closed_cleanly:
        written = service.tables_to_write(everything=True)
        for index_file, slots, covered in written:
            index_file.write_slots(slots, covered)
        service.tables_written(written)
        assert service.files[SEGMENT].slots is None
    with caplog.at_level(logging.INFO, logger="broker.store.queues.index"):
        again = reopened(tmp_path)
    rebuilt = any("rebuilding its hash slots" in record.getMessage() for record in caplog.records)
    assert rebuilt != closed_cleanly  # after a crash the table is rebuilt, else read back
    assert again.files[SEGMENT].slots is not None  # the newest file's table: in memory for new entries
    for target in targets(entries):
        assert looked_up(again, target) == scanned(entries, target)
    more = generated(3_000, seed=2)
    more["commit_log_offset"] += COUNT * 3
    again.add(SEGMENT, more)
    both = np.concatenate([entries, more])
    for target in targets(both):
        assert looked_up(again, target) == scanned(both, target)


@pytest.mark.parametrize("keep", [0, 5_000, 14_999, COUNT])
def test_truncation_then_new_entries(tmp_path: Path, keep: int) -> None:
    entries = generated(COUNT)
    service = filled(tmp_path, entries)
    service.truncate_at(keep * 3)
    assert (SEGMENT in service.files) == (keep > 0)
    more = generated(1_000, seed=3)
    more["commit_log_offset"] += keep * 3
    service.add(SEGMENT, more)
    both = np.concatenate([entries[:keep], more])
    for target in targets(both):
        assert looked_up(service, target) == scanned(both, target)


def test_files_before_hash_slots_are_converted(tmp_path: Path) -> None:
    entries = generated(COUNT)
    legacy = np.zeros(COUNT, dtype=LEGACY_ENTRY)
    for name in ("hash", "commit_log_offset", "store_ts"):
        legacy[name] = entries[name]
    tmp_path.joinpath(f"{SEGMENT:020d}").write_bytes(legacy.tobytes())
    service = reopened(tmp_path)
    assert service.files[SEGMENT].count == COUNT
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{SEGMENT:020d}"]
    for target in targets(entries):
        assert looked_up(service, target) == scanned(entries, target)


def test_slot_table_size_is_kept_per_file(tmp_path: Path) -> None:
    entries = generated(2_000)
    filled(tmp_path, entries, flush_every=1_000)
    service = IndexService(tmp_path, SLOTS * 4)  # a different setting later does not break old files
    service.load()
    assert service.files[SEGMENT].slot_count == SLOTS
    assert looked_up(service, int(entries["hash"][5])) == scanned(entries, int(entries["hash"][5]))
    assert isinstance(service.files[SEGMENT], IndexFile)


def test_files_know_their_time_range_and_lookups_outside_it_leave_them_out(tmp_path: Path) -> None:
    entries = generated(COUNT)
    service = filled(tmp_path, entries, flush_every=1_000)
    first, last = int(entries["store_ts"][0]), int(entries["store_ts"][-1])
    target = int(entries["hash"][5])
    assert (service.files[SEGMENT].begin_ts, service.files[SEGMENT].end_ts) == (first, last)
    crashed = reopened(tmp_path)  # slot table never written: the range comes from the entries
    assert (crashed.files[SEGMENT].begin_ts, crashed.files[SEGMENT].end_ts) == (first, last)
    written = service.tables_to_write(everything=True)
    for index_file, slots, covered in written:
        index_file.write_slots(slots, covered)
    again = reopened(tmp_path)  # from the header
    assert (again.files[SEGMENT].begin_ts, again.files[SEGMENT].end_ts) == (first, last)
    assert again.lookup(target, 0, first - 1).walks == ()
    assert again.lookup(target, last + 1, 2**62).walks == ()
    assert looked_up(again, target, last, last + 5) == scanned(entries, target, last, last + 5)
    assert looked_up(again, target) == scanned(entries, target)
