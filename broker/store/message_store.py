"""`MessageStore`: the commit log, consume queues and key index behind one interface.

The event loop owns all in-memory state; blocking file work runs on one I/O thread (writes) and
on reader threads (reads of written data, which never changes while the store serves: the loop
hands them what to read and takes their results back), so a slow disk never stalls other clients.
Startup recovers in the I/O thread before anything is served.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa

from broker.store.config import FlushDiskType, StoreConfig
from broker.store.duplicates.checker import DuplicateChecker
from broker.store.duplicates.window import DuplicateWindow
from broker.store.duplicates.window_snapshot import SNAPSHOT_INTERVAL_S
from broker.store.log.checkpoint import Checkpoint
from broker.store.log.commitlog import CommitLog
from broker.store.log.disk_space import DISK_CHECK_INTERVAL_S, DiskSpace
from broker.store.log.scattered import many_rounds_to_read, read_scattered
from broker.store.log.stored import Piece, StoredBatch, WireRecords, stored_row
from broker.store.queues.consume_queue import CQ_ENTRY, ConsumeQueue, read_blocks
from broker.store.queues.dispatch import ArrivalListener, Dispatcher
from broker.store.queues.entry_selection import by_stored_batch, live_entries, select_entries
from broker.store.queues.index import key_hash
from broker.store.queues.recovery_check import logics_agree_with_log
from broker.store.results import GetResult, GetStatus, PutResult, QueueStats
from broker.store.retention import InFlightReads, Retention
from broker.store.writer.append_requests import AppendRequest, StandardBatchFields, StandardMessage
from broker.store.writer.appender import CommitLogAppender
from broker.store.writer.commit_round import CommitRound
from rocketspark.service import PeriodicService

log = logging.getLogger(__name__)

_MIN_SCAN_ENTRIES = 16_000
#: queue entries summed per read by body_bytes (1.5 MiB of entries)
BODY_BYTES_STEP = 65_536


class MessageStore:
    def __init__(self, config: StoreConfig, store_host: str) -> None:
        self.config = config
        self._store_host = store_host
        self.commit_log = CommitLog(config.commit_log_dir, config.mapped_file_size_commit_log, config.batch_cache_bytes)
        self.logics = Dispatcher(config, store_host)
        self.index = self.logics.index
        self.queues = self.logics.queues
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-io")
        self._reader = ThreadPoolExecutor(max_workers=2, thread_name_prefix="store-read")
        self._reads = InFlightReads(self._reader)
        self.commit_log.granules.reader = self._reads.submit
        self.disk = DiskSpace(config)
        self.retention = Retention(
            config, self.commit_log, self.queues, self.index, self._reads, self._io, self.logics.build_index, self.disk
        )
        self._dispatched = 0  # commit log offset up to which consume queues and index are built
        self._commit_log_flushed = 0
        self.duplicates = DuplicateWindow(config.duplicate_window_seconds, config.duplicate_window_max_keys)
        self.appender = CommitLogAppender(
            self.commit_log,
            config=config,
            store_host=store_host,
            io_executor=self._io,
            duplicates=DuplicateChecker(self.duplicates, self.commit_log, self._batch_at, self._io),
            target=self,
        )
        self._services = [
            PeriodicService("store-flush-consume-queue", config.flush_interval_consume_queue / 1000, self.flush_logics),
            PeriodicService(
                "store-clean-expired", config.clean_resource_interval / 1000, self.retention.delete_expired
            ),
            PeriodicService("store-check-disk", DISK_CHECK_INTERVAL_S, self.retention.check_disk),
            PeriodicService("store-window-snapshot", SNAPSHOT_INTERVAL_S, self.save_duplicate_window),
        ]
        if config.flush_disk_type is FlushDiskType.ASYNC_FLUSH:
            self._services.append(
                PeriodicService(
                    "store-flush-commit-log", config.flush_interval_commit_log / 1000, self.flush_commit_log
                )
            )
        self.running = False

    @property
    def store_host(self) -> str:
        """`ip:port` written into messages and their offset msgIds."""
        return self._store_host

    @store_host.setter
    def store_host(self, address: str) -> None:
        if self.running:
            raise RuntimeError("the store host cannot change while the store runs")
        self._store_host = address
        self.appender.store_host = address

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._io, self._recover)
        await self.disk.check()
        self.appender.start()
        for service in self._services:
            service.start()
        self.running = True

    async def stop(self) -> None:
        """Write every accepted message, flush everything and leave a clean checkpoint."""
        if not self.running:
            return
        self.running = False
        await self.appender.stop()
        for service in self._services:
            await service.stop()
        await self.flush_commit_log()
        await self.flush_logics(closing=True)
        await self.save_duplicate_window()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._io, self._close)
        self._io.shutdown(wait=True)
        self._reader.shutdown(wait=True)

    def _close(self) -> None:
        self.commit_log.close()
        self.config.abort_path.unlink(missing_ok=True)

    def _recover(self) -> None:
        root = self.config.store_path_root_dir
        root.mkdir(parents=True, exist_ok=True)
        abnormal = self.config.abort_path.exists()
        checkpoint = Checkpoint.load(self.config.checkpoint_path)
        self.config.abort_path.touch()
        started = time.monotonic()
        end = self.commit_log.recover(checkpoint.commit_log_flushed if checkpoint else 0)
        self._commit_log_flushed = end
        self.logics.load_queues()
        self.index.load()
        dispatched = min(checkpoint.dispatched, end) if checkpoint else self.commit_log.min_offset
        if not logics_agree_with_log(self.queues, self.commit_log, dispatched, checkpoint.queues if checkpoint else {}):
            log.warning("consume queues disagree with the commit log; rebuilding them from the commit log")
            dispatched = self.commit_log.min_offset
        for queue in self.queues.values():
            queue.truncate_at_position(dispatched)
        self.index.truncate_at(dispatched)
        positions = self.commit_log.batches_between(dispatched, end)
        for position, batch in self.commit_log.arrow_batches(positions):
            segment = self.commit_log.segment_for(position)
            assert segment is not None
            self.logics.dispatch(position, segment.start, batch)
        self._dispatched = end
        self.duplicates.recover(self.commit_log, end, self.config.duplicate_window_path)
        for queue in self.queues.values():
            queue.drop_below(self.commit_log.min_offset)
            queue.delete_files_below(queue.min_offset)
        log.info(
            "store recovered%s in %.2f s: commit log %d..%d, %d queues, %d batches dispatched again",
            " after an abnormal shutdown" if abnormal else "",
            time.monotonic() - started,
            self.commit_log.min_offset,
            end,
            len(self.queues),
            len(positions),
        )

    # -- writing -------------------------------------------------------------------------------

    def put_messages(
        self, topic: str, queue_id: int, messages: list[StandardMessage], *, wait_flush: bool = True
    ) -> asyncio.Future[PutResult]:
        """Store standard messages (one send or one batch send) in one queue: the future of the result.

        Queued before this returns, or refused at once (SYSTEM_BUSY): a caller that only awaits the
        future later holds no unqueued message meanwhile."""
        future: asyncio.Future[PutResult] = self.disk.put_future()
        self.appender.submit(AppendRequest(topic, queue_id, future, messages=messages, wait_flush=wait_flush))
        return future

    def put_arrow(
        self,
        topic: str,
        queue_id: int,
        batch: pa.RecordBatch,
        *,
        born_timestamp: int,
        born_host: str,
        properties: pa.StringArray | None = None,
        standard: StandardBatchFields | None = None,
    ) -> asyncio.Future[PutResult]:
        """Store a producer's Arrow batch (PRODUCER_SCHEMA) in one queue: the future of the result,
        queued or refused as :meth:`put_messages`.

        `properties`: the batch's encoded properties, when the caller built them while checking it."""
        future: asyncio.Future[PutResult] = self.disk.put_future()
        self.appender.submit(
            AppendRequest(
                topic,
                queue_id,
                future,
                arrow=batch,
                arrow_properties=properties,
                born_timestamp=born_timestamp,
                born_host=born_host,
                standard=standard,
            )
        )
        return future

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        """The queue offset the next message stored in the queue takes (the writer's: CommitTarget)."""
        return self.logics.next_queue_offset(topic, queue_id)

    def commit_round_written(self, written: CommitRound, stored: StoredBatch, length: int) -> None:
        """The writer's (CommitTarget): register a written commit round and make it visible."""
        placement = written.placement
        assert placement is not None
        if written.sync:
            self._commit_log_flushed = max(self._commit_log_flushed, placement.position + length)
        self.commit_log.register(placement, length, stored, synced=written.sync)
        if isinstance(stored, WireRecords):
            self.logics.dispatch_sends(
                placement.position, placement.segment.start, written.store_timestamp, written.sends
            )
        else:
            self.logics.dispatch(placement.position, placement.segment.start, stored)
        self._dispatched = placement.position + length

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        self.logics.add_arrival_listener(listener)

    # -- flushing and retention ----------------------------------------------------------------

    async def flush_commit_log(self) -> None:
        """fsync what was written since the last flush; only then count it as flushed."""
        segments = self.commit_log.take_unflushed()
        end = self.commit_log.max_offset  # every record before it is synced already or in `segments`
        if segments:
            try:
                await asyncio.get_running_loop().run_in_executor(self._io, self.commit_log.sync, segments)
            except BaseException:
                self.commit_log.restore_unflushed(segments)
                raise
        self._commit_log_flushed = max(self._commit_log_flushed, end)

    async def flush_logics(self, *, closing: bool = False) -> None:
        """Persist new consume queue and index entries, then the checkpoint that vouches for them.

        Slot tables of complete index files (all of them when `closing`) follow their entries."""
        self.logics.build_index()
        dispatched = self._dispatched
        queue_flushes = [p for p in (q.pending_flush() for q in self.queues.values()) if p is not None]
        lengths = {f"{topic}:{queue_id}": q.max_offset for (topic, queue_id), q in self.queues.items()}
        index_flushes = self.index.pending_flushes()
        slot_tables = self.index.tables_to_write(everything=closing)
        positions = self.commit_log.positions_to_save(self._commit_log_flushed, everything=closing)

        def write() -> None:
            self.commit_log.save_positions(positions)
            for pending in queue_flushes:
                pending.queue.write(pending)
            for index_file, first, entries in index_flushes:
                index_file.write(first, entries)
            for index_file, slots, covered in slot_tables:
                index_file.write_slots(slots, covered)
            Checkpoint(self._commit_log_flushed, dispatched, lengths).save(self.config.checkpoint_path)

        await asyncio.get_running_loop().run_in_executor(self._io, write)
        for pending in queue_flushes:
            pending.queue.mark_flushed(pending.first_offset + len(pending.entries))
        for index_file, first, entries in index_flushes:
            index_file.mark_flushed(first + len(entries))
        self.index.tables_written(slot_tables)

    async def save_duplicate_window(self) -> None:
        """Snapshot the duplicate window (when it changed), so a restart need not rebuild it from the log."""
        await self.duplicates.save(self.commit_log.max_offset, self.config.duplicate_window_path)

    # -- reading -------------------------------------------------------------------------------

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.logics.next_queue_offset(topic, queue_id)

    def min_offset(self, topic: str, queue_id: int) -> int:
        queue = self.queues.get((topic, queue_id))
        return queue.min_offset if queue else 0

    async def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset stored at or after `timestamp_ms`; the max offset if none is."""
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            return 0
        found = queue.search("store_ts", timestamp_ms)
        if isinstance(found, int):
            return found
        return max(await self._reads.submit(found.run), queue.min_offset)

    async def earliest_store_time(self, topic: str, queue_id: int) -> int:
        return await self.store_time_at(topic, queue_id, self.min_offset(topic, queue_id))

    async def store_time_at(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at `offset`, 0 when there is none."""
        queue = self.queues.get((topic, queue_id))
        if queue is None or not queue.min_offset <= offset < queue.max_offset:
            return 0
        return int((await self._entries(queue, offset, 1))["store_ts"][0])

    async def stored_by(self, topic: str, queue_id: int, offset: int, timestamp_ms: int, limit: int) -> tuple[int, int]:
        """From `offset` (or the queue's first offset, when later): that offset, and how many of the
        next messages (at most `limit`) were stored at or before `timestamp_ms`, in a row."""
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            return offset, 0
        begin = max(offset, queue.min_offset)
        stamps = (await self._entries(queue, begin, limit))["store_ts"]
        later = np.flatnonzero(stamps > timestamp_ms)
        return begin, int(later[0]) if len(later) else len(stamps)

    async def body_bytes(self, topic: str, queue_id: int, offset: int, end: int, max_bytes: int) -> tuple[int, int]:
        """From `offset` (or the queue's first offset, when later) towards `end` (at most the max
        offset): the first offset past the messages whose body sizes add up to at most `max_bytes`,
        and their sum. Reads the queue's entries only (BODY_BYTES_STEP at a time), never a body."""
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            return offset, 0
        position, end, total = max(offset, queue.min_offset), min(end, queue.max_offset), 0
        while position < end:
            sizes = (await self._entries(queue, position, min(end - position, BODY_BYTES_STEP)))["size"]
            if not len(sizes):
                break
            sums = np.cumsum(sizes, dtype=np.int64) + total
            fit = int(np.searchsorted(sums, max_bytes, side="right"))
            if fit < len(sizes):
                return position + fit, int(sums[fit - 1]) if fit else total
            position, total = position + len(sizes), int(sums[-1])
        return position, total

    async def queue_stats(self, topic: str, queue_id: int) -> QueueStats:
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            return QueueStats(0, 0, 0)
        low, high = queue.min_offset, queue.max_offset
        last = int((await self._entries(queue, high - 1, 1))["store_ts"][0]) if high > low else 0
        return QueueStats(low, high, last)

    async def queue_entries(self, topic: str, queue_id: int, start: int, count: int) -> np.ndarray:
        """Up to `count` entries (CQ_ENTRY) of a queue from `start` (or its first offset), a copy."""
        queue = self.queues.get((topic, queue_id))
        return (await self._entries(queue, start, count)).copy() if queue else np.empty(0, CQ_ENTRY)

    async def stored_rows(self, entries: np.ndarray) -> list[Piece]:
        """The stored messages that consume queue `entries` (of queue_entries) name, those still held."""
        return await self._take_rows(live_entries(entries, self.commit_log.min_offset))

    async def _entries(self, queue: ConsumeQueue, start: int, count: int) -> np.ndarray:
        """`queue.entries(start, count)`, its blocks not in the cache read on a reader thread."""
        loaded: dict[int, np.ndarray] = {}
        while reads := queue.gather_blocks(start, count, loaded):
            blocks = await self._reads.submit(functools.partial(read_blocks, reads))
            read = dict(zip([r.block for r in reads], blocks, strict=True))
            if self.queues.get((queue.topic, queue.queue_id)) is queue:  # else deleted meanwhile
                queue.keep_blocks(read)
            loaded.update(read)
        return queue.entries(start, count, loaded)

    async def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_messages: int,
        max_bytes: int,
        tag_codes_filter: frozenset[int] | None = None,
        message_overhead: int = 0,
    ) -> GetResult:
        """RocketMQ's `getMessage`: up to `max_messages` from `offset`, filtered by tag codes.

        `max_bytes` caps body bytes plus `message_overhead` per message (what the answer's encoding
        adds to each body), so an answer stays within a frame."""
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        low, high = queue.min_offset, queue.max_offset
        if high == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, low, high)
        if offset < low:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, low, low, high)
        if offset == high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, low, high)
        if offset > high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, low if low == 0 else high, low, high)

        # a tag filter may skip messages: look further ahead than the messages wanted
        scanned = await self._entries(
            queue, offset, max(_MIN_SCAN_ENTRIES, max_messages) if tag_codes_filter is not None else max_messages
        )
        taken, scanned_past = select_entries(
            scanned,
            tag_codes_filter,
            max_messages=max_messages,
            max_bytes=max_bytes,
            message_overhead=message_overhead,
        )
        next_offset = offset + scanned_past
        if not len(taken):
            return GetResult(GetStatus.NO_MATCHED_MESSAGE, next_offset, low, high)
        taken = live_entries(taken, self.commit_log.min_offset)
        if not len(taken):
            return GetResult(GetStatus.MESSAGE_WAS_REMOVING, next_offset, low, high)
        # a copy: the entries may be a view of the queue's tail, which is rewritten in place
        # (retention, truncation) while the batches are read
        pieces = await self._take_rows(taken.copy())
        return GetResult(GetStatus.FOUND, next_offset, low, high, pieces)

    async def _take_rows(self, entries: np.ndarray) -> list[Piece]:
        if many_rounds_to_read(entries["batch_pos"], self.commit_log.is_cached):  # on the loop: see retention.py
            parts = [(s, entries[at]) for s, at in self.commit_log.segment_runs(entries["batch_pos"])]
            return await self._reads.submit(functools.partial(read_scattered, parts))
        runs = by_stored_batch(entries)
        stored = [self.commit_log.cached(position) for position, _ in runs]
        missing = [position for (position, _), b in zip(runs, stored, strict=True) if b is None]
        if missing:
            segments = [self.commit_log.segment_holding(p) for p in missing]  # on the loop: see retention.py
            loaded = await self._reads.submit(lambda: [s.read(p) for s, p in zip(segments, missing, strict=True)])
            by_position = dict(zip(missing, loaded, strict=True))
            for position, batch in by_position.items():
                self.commit_log.cache_put(position, batch)
            stored = [b if b is not None else by_position[p] for (p, _), b in zip(runs, stored, strict=True)]
        result: list[Piece] = []
        for batch, (_, rows) in zip(stored, runs, strict=True):
            assert batch is not None
            result.append(Piece(batch, rows))
        return result

    async def message_at(self, commit_log_offset: int) -> dict[str, Any] | None:
        """The message at `commit_log_offset` as a STORED_SCHEMA row (VIEW_MESSAGE_BY_ID, the end
        of a transaction, a send back); None where no message is."""
        return (await self.messages_at([commit_log_offset]))[0]

    async def messages_at(self, commit_log_offsets: Sequence[int]) -> list[dict[str, Any] | None]:
        """:meth:`message_at` of each offset, located in one pass (the ends of many transactions)."""
        positions, rows = await self.commit_log.locate_many(np.asarray(commit_log_offsets, dtype=np.int64))
        return [
            None if position < 0 else stored_row(await self._batch_at(int(position)), int(row))
            for position, row in zip(positions.tolist(), rows.tolist(), strict=True)
        ]

    async def _batch_at(self, position: int) -> StoredBatch:
        cached = self.commit_log.cached(position)
        if cached is not None:
            return cached
        segment = self.commit_log.segment_holding(position)
        loaded = await self._reads.submit(lambda: segment.read(position))
        self.commit_log.cache_put(position, loaded)
        return loaded

    async def query_by_key(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int, *, unique_key: bool
    ) -> list[dict[str, Any]]:
        """Messages of `topic` whose KEYS contain `key` (or whose msgId is `key`), newest first, as
        STORED_SCHEMA rows."""
        self.logics.build_index()
        lookup = self.index.lookup(key_hash(topic, key), begin_ms, end_ms)
        limit = max_num * 4  # by hash only: some may be other keys
        read = functools.partial(lookup.offsets, limit)
        offsets = await self._reads.submit(read) if lookup.reads_files else read()
        found: list[dict[str, Any]] = []
        for message in await self.messages_at(offsets):  # located in one pass
            if message is None or message["topic"] != topic:
                continue
            keys = () if unique_key else (message["keys"] or "").split(" ")
            if message["msg_id"] == key or key in keys:
                found.append(message)
                if len(found) >= max_num:
                    break
        return found

    async def delete_topic(self, topic: str) -> None:
        """Forget a topic's consume queues (its stored messages age out with their segments)."""
        removed = [self.queues.pop(k) for k in [k for k in self.queues if k[0] == topic]]
        topic_dir = self.config.consume_queue_dir / topic

        def delete_files() -> None:  # on the I/O thread, after any flush already queued there
            for queue in removed:
                queue.delete_files()
            if topic_dir.is_dir():
                os.rmdir(topic_dir)

        await self._reads.finished()  # reads of these queues' files that run now
        await asyncio.get_running_loop().run_in_executor(self._io, delete_files)
        await self.flush_logics()  # the checkpoint must stop vouching for the deleted queues
