"""Power-loss safety of the flushed offset: it covers only fsynced records, and new files' names
are fsynced (their directories) before anything vouches for them.

`os.fsync` is wrapped to observe which files and directories the real store fsyncs; one test also
makes it fail once, as a failing disk would.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.store.config import FlushDiskType, StoreConfig
from broker.store.log.checkpoint import Checkpoint
from broker.store.log.commitlog import segment_name
from broker.store.message_store import MessageStore
from tests.store.conftest import STORE_HOST, StoreFactory, message

SEGMENT = 4096
FILLS_A_SEGMENT = b"x" * SEGMENT


class FsyncLog:
    """Paths fsynced so far, in order; `fail_next(path)` makes the next fsync of `path` fail."""

    def __init__(self) -> None:
        self.paths: list[Path] = []
        self._failing: set[Path] = set()

    def wrap(self, real: Callable[[int], None]) -> Callable[[int], None]:
        def fsync(fd: int) -> None:
            path = Path(os.readlink(f"/proc/self/fd/{fd}"))
            if path in self._failing:
                self._failing.discard(path)
                raise OSError(5, "Input/output error (injected)", str(path))
            real(fd)
            self.paths.append(path)

        return fsync

    def fail_next(self, path: Path) -> None:
        self._failing.add(path.resolve())

    def since(self, mark: int) -> list[Path]:
        return self.paths[mark:]


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> FsyncLog:
    log = FsyncLog()
    monkeypatch.setattr(os, "fsync", log.wrap(os.fsync))
    return log


def segment_path(store: MessageStore, start: int) -> Path:
    return (store.config.commit_log_dir / segment_name(start)).resolve()


async def flushed_in_checkpoint(store: MessageStore) -> int:
    await store.flush_logics()
    checkpoint = Checkpoint.load(store.config.checkpoint_path)
    assert checkpoint is not None
    return checkpoint.commit_log_flushed


async def test_sync_send_into_a_new_segment_fsyncs_earlier_rounds_and_the_directory(
    open_store: StoreFactory, fsyncs: FsyncLog
) -> None:
    store = await open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=SEGMENT)
    # a send that does not wait for the disk fills the first segment: it is written, not fsynced
    await store.put_messages("T", 0, [message(FILLS_A_SEGMENT)], wait_flush=False)
    first_end = store.commit_log.max_offset
    mark = len(fsyncs.paths)
    result = await store.put_messages("T", 0, [message(b"durable")])
    assert result.first_commit_log_offset == first_end  # it went to a new segment
    synced = fsyncs.since(mark)
    # acknowledged: the new segment, its name in the directory and the earlier round are on disk
    assert segment_path(store, first_end) in synced
    assert store.config.commit_log_dir.resolve() in synced
    assert segment_path(store, 0) in synced
    assert await flushed_in_checkpoint(store) == store.commit_log.max_offset


async def test_async_flush_fsyncs_a_new_segments_directory(open_store: StoreFactory, fsyncs: FsyncLog) -> None:
    store = await open_store(mapped_file_size_commit_log=SEGMENT, flush_interval_commit_log=3_600_000)
    await store.put_messages("T", 0, [message(FILLS_A_SEGMENT)])
    await store.put_messages("T", 0, [message(b"second segment")])
    mark = len(fsyncs.paths)
    await store.flush_commit_log()
    synced = fsyncs.since(mark)
    assert {segment_path(store, 0), store.config.commit_log_dir.resolve()} <= set(synced)
    assert segment_path(store, store.commit_log.segments[-1].start) in synced
    assert await flushed_in_checkpoint(store) == store.commit_log.max_offset


async def test_a_failed_fsync_does_not_advance_the_flushed_offset(open_store: StoreFactory, fsyncs: FsyncLog) -> None:
    store = await open_store(flush_interval_commit_log=3_600_000)
    await store.put_messages("T", 0, [message(b"first")])
    await store.flush_commit_log()
    flushed = await flushed_in_checkpoint(store)
    await store.put_messages("T", 0, [message(b"second")])
    fsyncs.fail_next(segment_path(store, 0))
    with pytest.raises(OSError, match="injected"):
        await store.flush_commit_log()
    assert await flushed_in_checkpoint(store) == flushed < store.commit_log.max_offset
    mark = len(fsyncs.paths)
    await store.flush_commit_log()  # the segment is still due: fsynced now, then counted as flushed
    assert segment_path(store, 0) in fsyncs.since(mark)
    assert await flushed_in_checkpoint(store) == store.commit_log.max_offset


async def test_a_failed_sync_round_does_not_advance_the_flushed_offset(
    open_store: StoreFactory, fsyncs: FsyncLog
) -> None:
    store = await open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    await store.put_messages("T", 0, [message(b"first")])
    flushed = await flushed_in_checkpoint(store)
    fsyncs.fail_next(segment_path(store, 0))
    with pytest.raises(OSError, match="injected"):
        await store.put_messages("T", 0, [message(b"never acknowledged")])
    assert await flushed_in_checkpoint(store) == flushed
    result = await store.put_messages("T", 0, [message(b"second")])
    assert result.first_queue_offset == 1
    assert await flushed_in_checkpoint(store) == store.commit_log.max_offset


async def test_new_consume_queue_files_have_their_directories_fsynced(
    open_store: StoreFactory, fsyncs: FsyncLog
) -> None:
    store = await open_store(mapped_file_size_consume_queue=4 * 20)  # 4 entries a file
    await store.put_messages("T", 3, [message(b"m%d" % i) for i in range(6)])
    mark = len(fsyncs.paths)
    await store.flush_logics()
    synced = fsyncs.since(mark)
    queue_dir = (store.config.consume_queue_dir / "T" / "3").resolve()
    assert {queue_dir / f"{0:020d}", queue_dir / f"{4:020d}", queue_dir} <= set(synced)
    assert {queue_dir.parent, queue_dir.parent.parent} <= set(synced)  # the new topic and queue directories
    assert synced[-1] == store.config.checkpoint_path.parent.resolve()  # the checkpoint comes last
    assert queue_dir in synced[:-1]


async def test_recovery_fsyncs_the_records_it_accepts_past_the_flushed_offset(
    open_store: StoreFactory, fsyncs: FsyncLog, tmp_path: Path
) -> None:
    store = await open_store(flush_interval_commit_log=3_600_000)
    await store.put_messages("T", 0, [message(b"in the page cache only")])
    crashed = tmp_path / "crashed"  # the files as a crash would leave them: nothing flushed or checkpointed
    shutil.copytree(store.config.store_path_root_dir, crashed)
    mark = len(fsyncs.paths)
    recovered = MessageStore(StoreConfig(store_path_root_dir=crashed), STORE_HOST)
    await recovered.start()
    try:
        assert (crashed / "commitlog" / segment_name(0)).resolve() in fsyncs.since(mark)
        assert recovered.max_offset("T", 0) == 1
        assert await flushed_in_checkpoint(recovered) == recovered.commit_log.max_offset
    finally:
        await recovered.stop()
