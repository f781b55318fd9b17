"""The commit log's record positions: memory per segment independent of the number of records,
startup reading only the headers its positions files do not cover, and lookups by commit log
offset that read a granule's headers from disk (broker/store/log/record_positions.py)."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import numpy as np
import pytest

from broker.store.log.record_positions import GRANULE, SAVE_EVERY_BYTES, RecordPositions
from broker.store.message_store import MessageStore
from tests.store.conftest import StoreFactory, message

SEGMENT = 1 << 20


async def single_records(store: MessageStore, count: int, start: int = 0) -> None:
    """`count` sends of one message each, one after another: one record each."""
    for n in range(start, start + count):
        await store.put_messages("T", n % 4, [message(b"m%06d" % n)])


def count_preads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.pread

    def counted(fd: int, length: int, offset: int) -> bytes:
        calls.append(length)
        return real(fd, length, offset)

    monkeypatch.setattr(os, "pread", counted)
    return calls


def count_granule_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The numbers of the granules read from disk from now on, in order."""
    reads: list[int] = []
    real = RecordPositions.granule

    def counted(self: RecordPositions, fd: int, number: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        reads.append(number)
        return real(self, fd, number, size)

    monkeypatch.setattr(RecordPositions, "granule", counted)
    return reads


async def test_memory_of_a_segment_does_not_grow_with_its_records(open_store: StoreFactory) -> None:
    store = await open_store(mapped_file_size_commit_log=SEGMENT)
    await single_records(store, 3000)
    segment = store.commit_log.segments[0]
    assert store.appender.rounds == 3000
    assert segment.positions.nbytes == 8 * -(-segment.size // GRANULE)  # one start per 64 KiB, not per record


async def test_clean_restart_reads_no_header_its_positions_file_covers(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await open_store(mapped_file_size_commit_log=SEGMENT)
    await single_records(store, 3000)
    offsets = [
        int(o)
        for o in (await store.get_messages("T", 1, 0, max_messages=10_000, max_bytes=1 << 30))
        .batches()[0]
        .column("commit_log_offset")
        .to_numpy()
    ]
    await store.stop()
    preads = count_preads(monkeypatch)
    reopened = await open_store(mapped_file_size_commit_log=SEGMENT)
    monkeypatch.undo()
    # a header per segment (its positions file's last record) and per queue (recovery's check of
    # its last entry): a read per record, or the duplicate window read back, would be thousands
    header_reads = [n for n in preads if n in (16, 256 * 1024)]
    assert len(header_reads) <= len(reopened.commit_log.segments) + len(reopened.queues), preads[:20]
    for offset in offsets[:: max(1, len(offsets) // 50)]:
        found = await reopened.message_at(offset)
        assert found is not None and found["commit_log_offset"] == offset


async def test_after_a_crash_only_what_the_positions_files_miss_is_read(
    open_store: StoreFactory, tmp_path: Any
) -> None:
    """The active segment's positions are saved every SAVE_EVERY_BYTES; a crash (no clean stop)
    reads the headers after that, and every message is found again."""
    import shutil

    from broker.store.config import StoreConfig
    from tests.store.conftest import STORE_HOST

    store = await open_store(mapped_file_size_commit_log=SEGMENT)
    await single_records(store, 2000)
    await store.flush_commit_log()
    await store.flush_logics()
    crashed = tmp_path / "crashed"
    shutil.copytree(store.config.store_path_root_dir, crashed)
    assert not (crashed / "positions" / "00000000000000000000").exists()
    recovered = MessageStore(StoreConfig(store_path_root_dir=crashed, mapped_file_size_commit_log=SEGMENT), STORE_HOST)
    await recovered.start()
    try:
        assert recovered.commit_log.max_offset == store.commit_log.max_offset
        for queue in range(4):
            assert recovered.max_offset("T", queue) == store.max_offset("T", queue)
        last = store.commit_log.max_offset - 1
        while (await store.message_at(last)) is None:
            last -= 1
        assert (await recovered.message_at(last)) is not None
    finally:
        await recovered.stop()
    assert SAVE_EVERY_BYTES > SEGMENT  # so the small segment above had no positions file before it closed


async def test_lookups_by_offset_read_headers_on_reader_threads(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await open_store(mapped_file_size_commit_log=SEGMENT, batch_cache_bytes=1)
    await single_records(store, 500)
    batch = (await store.get_messages("T", 2, 0, max_messages=1000, max_bytes=1 << 30)).batches()[0]
    offsets = np.asarray(batch.column("commit_log_offset"))
    loop = threading.current_thread()
    threads: list[str] = []
    real = os.pread

    def watched(fd: int, length: int, offset: int) -> bytes:
        threads.append(threading.current_thread().name)
        return real(fd, length, offset)

    monkeypatch.setattr(os, "pread", watched)
    for offset in offsets[:20].tolist():
        found = await store.message_at(offset)
        assert found is not None and found["body"] == batch.column("body")[offsets.tolist().index(offset)].as_py()
    assert threads and loop.name not in threads


async def test_a_resend_finds_its_first_copy_reading_headers_on_reader_threads(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The duplicate check locates a resent key's first copy by its commit log offset: the
    granule's headers are read on a reader thread, not on the event loop."""
    settings = {"mapped_file_size_commit_log": SEGMENT, "batch_cache_bytes": 1, "duplicate_window_seconds": 600}
    store = await open_store(**settings)
    firsts = [await store.put_messages("T", 0, [message(b"K-%d" % i, uniq=f"K-{i}")]) for i in range(200)]
    await store.stop()
    reopened = await open_store(**settings)  # nothing of the log cached
    loop = threading.current_thread().name
    threads: list[str] = []
    real = os.pread

    def watched(fd: int, length: int, offset: int) -> bytes:
        threads.append(threading.current_thread().name)
        return real(fd, length, offset)

    monkeypatch.setattr(os, "pread", watched)
    again = await reopened.put_messages("T", 0, [message(b"K-150", uniq="K-150")])
    assert again.duplicates == 1 and again.commit_log_offsets[0] == firsts[150].first_commit_log_offset
    assert threads and loop not in threads, threads


async def test_lookups_of_messages_in_the_granule_being_written_read_no_headers(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end of a transaction or a send back looks up a message just written: the records of the
    granule being written are known without reading it. Older granules are read from disk, and so
    is the granule being written after a restart (its earlier records are not in memory then)."""
    store = await open_store(mapped_file_size_commit_log=SEGMENT)
    await single_records(store, 1000)  # about 3 granules
    pulled = await store.get_messages("T", 1, 0, max_messages=10_000, max_bytes=1 << 30)
    offsets = pulled.batches()[0].column("commit_log_offset").to_pylist()
    newest, oldest = offsets[-1], offsets[0]
    assert newest // GRANULE != oldest // GRANULE
    reads = count_granule_reads(monkeypatch)
    for offset in offsets[-5:]:
        assert (await store.message_at(offset) or {}).get("commit_log_offset") == offset
    assert reads == []
    assert (await store.message_at(oldest) or {}).get("commit_log_offset") == oldest
    assert reads == [oldest // GRANULE]
    (last,) = (await store.put_messages("T", 0, [message(b"last")])).commit_log_offsets
    assert (await store.message_at(last) or {}).get("body") == b"last"
    assert reads == [oldest // GRANULE]
    await store.stop()

    reopened = await open_store(mapped_file_size_commit_log=SEGMENT)
    await single_records(reopened, 1, start=1001)
    assert (await reopened.message_at(newest) or {}).get("commit_log_offset") == newest
    assert reads[-1] == newest // GRANULE  # read from disk: the restart forgot its earlier records


async def test_lookups_at_the_same_time_share_the_read_of_a_granule(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ends of a transactional write come many at once, for messages of the same granules."""
    store = await open_store(mapped_file_size_commit_log=SEGMENT)
    await single_records(store, 1000)
    pulled = await store.get_messages("T", 1, 0, max_messages=10_000, max_bytes=1 << 30)
    offsets = [o for o in pulled.batches()[0].column("commit_log_offset").to_pylist() if o < GRANULE]
    reads = count_granule_reads(monkeypatch)
    found = await asyncio.gather(*(store.message_at(offset) for offset in offsets))
    assert [(m or {}).get("commit_log_offset") for m in found] == offsets
    assert reads == [0]
