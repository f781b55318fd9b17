"""The duplicate window comes back from its snapshot at a restart, not from the commit log: only
the records after the snapshot are read, and keys whose records a crash lost are forgotten."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from broker.store.config import StoreConfig
from broker.store.duplicates.window import DuplicateWindow
from broker.store.duplicates.window_snapshot import WindowSnapshot
from broker.store.log.commitlog import CommitLog
from broker.store.log.stored import as_batches
from broker.store.message_store import MessageStore
from tests.store.conftest import STORE_HOST, StoreFactory, message

WINDOW = {"duplicate_window_seconds": 600}


def batches_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows of each stored batch the duplicate window's recovery reads back from the log."""
    rows: list[int] = []
    real = DuplicateWindow.add_stored_batch

    def counted(self: DuplicateWindow, batch: object, now_ms: int) -> None:
        rows.append(batch.num_rows)  # type: ignore[attr-defined]
        real(self, batch, now_ms)

    monkeypatch.setattr(DuplicateWindow, "add_stored_batch", counted)
    return rows


async def test_a_clean_restart_restores_the_window_without_reading_the_log(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await open_store(**WINDOW)
    firsts = [await store.put_messages("T", 0, [message(b"K-%d" % i, uniq=f"K-{i}")]) for i in range(300)]
    await store.stop()
    assert store.config.duplicate_window_path.exists()
    read = batches_read(monkeypatch)
    reopened = await open_store(**WINDOW)
    assert read == []
    assert len(reopened.duplicates) == 300
    again = await reopened.put_messages("T", 0, [message(b"K-7", uniq="K-7"), message(b"new", uniq="N")])
    assert again.duplicates == 1
    assert again.commit_log_offsets[0] == firsts[7].first_commit_log_offset
    assert reopened.max_offset("T", 0) == 301


async def test_after_a_crash_the_records_after_the_snapshot_are_read_and_lost_keys_forgotten(
    open_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await open_store(**WINDOW)
    for i in range(100):
        await store.put_messages("T", 0, [message(b"A-%d" % i, uniq=f"A-{i}")])
    await store.save_duplicate_window()  # the periodic snapshot
    for i in range(50):
        await store.put_messages("T", 0, [message(b"B-%d" % i, uniq=f"B-{i}")])
    await store.flush_commit_log()
    await store.flush_logics()
    crashed = tmp_path / "crashed"
    shutil.copytree(store.config.store_path_root_dir, crashed)  # as kill -9 leaves the files
    read = batches_read(monkeypatch)
    recovered = MessageStore(StoreConfig(store_path_root_dir=crashed, **WINDOW), STORE_HOST)  # type: ignore[arg-type]
    await recovered.start()
    try:
        assert sum(read) == 50  # only the records after the snapshot
        result = await recovered.put_messages(
            "T", 0, [message(b"A-3", uniq="A-3"), message(b"B-49", uniq="B-49"), message(b"C", uniq="C")]
        )
        assert result.duplicates == 2
    finally:
        await recovered.stop()


async def test_keys_of_records_the_log_lost_leave_the_restored_window(open_store: StoreFactory) -> None:
    """A snapshot newer than what reached the disk: its keys past the recovered end are dropped,
    so resending them stores them again."""
    store = await open_store(**WINDOW)
    kept = await store.put_messages("T", 0, [message(b"kept", uniq="KEPT")])
    lost = await store.put_messages("T", 0, [message(b"lost", uniq="LOST")])
    await store.stop()
    segment = sorted(store.config.commit_log_dir.iterdir())[-1]
    with segment.open("r+b") as file:  # the last record never reached the disk
        file.truncate(lost.first_commit_log_offset)
    store.config.checkpoint_path.unlink()
    reopened = await open_store(**WINDOW)
    assert len(reopened.duplicates) == 1
    assert not store.config.duplicate_window_path.exists()  # it vouched for a lost record
    result = await reopened.put_messages("T", 0, [message(b"lost", uniq="LOST"), message(b"kept", uniq="KEPT")])
    assert result.duplicates == 1 and result.commit_log_offsets[1] == kept.first_commit_log_offset
    got = await reopened.get_messages("T", 0, 0, max_messages=10, max_bytes=1 << 20)
    assert [b for batch in as_batches([*got.batches()]) for b in batch.column("body").to_pylist()] == [
        b"kept",
        b"lost",
    ]


def test_a_snapshot_saved_while_keys_are_added_restores_exactly_the_keys_it_names(tmp_path: Path) -> None:
    """The save reads the tables' live slots and filters: keys added after the snapshot was taken
    are not found in the restored window, which takes new keys as before."""
    window = DuplicateWindow(600, 1_000)
    now = int(time.time() * 1000)
    first = np.arange(1, 301, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    later = first + np.uint64(1)
    where = np.arange(300, dtype=np.int64)
    window.add(now, first, where.astype(np.int32), where, where)
    snapshot = window.snapshot(through=300)
    window.add(now, later, where.astype(np.int32), where, where + 300)
    snapshot.save(tmp_path / "window")
    saved = WindowSnapshot.load(tmp_path / "window")
    assert saved is not None and saved.tables[0].slots is not None  # restored whole, not placed again

    empty_log = CommitLog(tmp_path / "commitlog", 1 << 20, 1 << 20)
    empty_log.recover(0)
    restored = DuplicateWindow(600, 1_000)
    restored.recover(empty_log, 1 << 40, tmp_path / "window")
    assert restored.lookup(first, now).hit.all()
    assert not restored.lookup(later, now).hit.any()
    restored.add(now, later, where.astype(np.int32), where, where + 300)
    found = restored.lookup(later, now)
    assert found.hit.all() and (found.commit_log_offsets == where + 300).all()
    assert (restored.lookup(first, now).commit_log_offsets == where).all()
    empty_log.close()
