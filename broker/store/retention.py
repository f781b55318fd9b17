"""Retention: expired commit log segments leave the store without blocking the event loop, and
without closing a file that a read on a reader thread still uses.

The bookkeeping (which segments, queue min offsets, index files) changes on the event loop at once,
so no new read can reach an expired segment; the files are closed and deleted on the store's I/O
thread after every read that was running at that moment has finished.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

from broker.store.config import StoreConfig
from broker.store.log.commitlog import CommitLog
from broker.store.log.disk_space import DiskSpace
from broker.store.queues.consume_queue import ConsumeQueue
from broker.store.queues.index import IndexService

T = TypeVar("T")


class InFlightReads:
    """Blocking reads run on reader threads, remembered until they finish."""

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._running: set[asyncio.Future[Any]] = set()

    def submit(self, read: Callable[[], T]) -> asyncio.Future[T]:
        future = asyncio.get_running_loop().run_in_executor(self._executor, read)
        self._running.add(future)
        future.add_done_callback(self._running.discard)
        return future

    async def finished(self) -> None:
        """Wait for the reads running now; reads submitted later are not waited for."""
        running = list(self._running)
        if running:
            await asyncio.wait(running)


class Retention:
    def __init__(
        self,
        config: StoreConfig,
        commit_log: CommitLog,
        queues: dict[tuple[str, int], ConsumeQueue],
        index: IndexService,
        reads: InFlightReads,
        io_executor: Executor,
        build_index: Callable[[], None],
        disk: DiskSpace,
    ) -> None:
        self._config = config
        self._commit_log = commit_log
        self._queues = queues
        self._index = index
        self._reads = reads
        self._io = io_executor
        self._build_index = build_index
        self._disk = disk

    async def check_disk(self) -> None:
        """Measure the store's disk (every few seconds); past diskMaxUsedSpaceRatio, delete now."""
        await self._disk.check()
        if self._disk.bytes_over_max_used():
            await self.delete_expired()

    async def delete_expired(self) -> None:
        """Delete segments untouched for `fileReservedTime` hours, at the hours of `deleteWhen`; and
        at once the oldest ones, however young, while the disk is past diskMaxUsedSpaceRatio."""
        over = self._disk.bytes_over_max_used()
        hours = self._config.delete_hours()
        if not over and hours is not None and time.localtime().tm_hour not in hours:
            return
        self._build_index()  # index entries of dispatched batches belong to their segment's file
        expired = self._commit_log.detach_expired(self._config.file_reserved_time * 3600, free_bytes=over)
        if not expired:
            return
        min_offset = self._commit_log.min_offset
        queue_floors = []
        for queue in self._queues.values():
            queue.drop_below(min_offset)
            queue_floors.append((queue, queue.min_offset))
        index_paths = self._index.drop_segments_below(min_offset)
        await self._reads.finished()

        def delete_files() -> None:
            for segment in expired:
                segment.delete()
            for path in index_paths:
                path.unlink(missing_ok=True)
            for queue, floor in queue_floors:
                queue.delete_files_below(floor)

        # the I/O thread also runs fsyncs of these segments' descriptors: ones queued earlier run first
        await asyncio.get_running_loop().run_in_executor(self._io, delete_files)
