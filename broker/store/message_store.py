"""`MessageStore`: the commit log, consume queues and key index behind one interface.

The event loop owns all in-memory state; blocking file work runs on one I/O thread, so a slow
disk never stalls other clients. Startup recovers in that thread before anything is served.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker.store.append_requests import AppendRequest, StandardMessage
from broker.store.appender import CommitLogAppender, Round
from broker.store.block_cache import BlockCache
from broker.store.checkpoint import Checkpoint
from broker.store.commitlog import CommitLog
from broker.store.config import FlushDiskType, StoreConfig
from broker.store.consume_queue import CQ_ENTRY, ConsumeQueue
from broker.store.dedup import DuplicateWindow
from broker.store.index import INDEXED_COLUMNS, IndexService, index_entries
from broker.store.recovery_check import logics_agree_with_log
from broker.store.results import GetResult, GetStatus, PutResult
from broker.store.retention import InFlightReads, Retention
from broker.store.stored import Piece, StoredBatch, WireRecords, arrow_batches, as_batches
from rocketspark.message.message_columns import tag_code, tag_codes
from rocketspark.service import PeriodicService

log = logging.getLogger(__name__)

#: called with (topic, queue id, new max offset, tag codes of the new messages) after every store
ArrivalListener = Callable[[str, int, int, np.ndarray], None]

_MIN_SCAN_ENTRIES = 16_000
_INDEX_BATCH_ROWS = 50_000


@dataclass(frozen=True, slots=True)
class QueueStats:
    min_offset: int
    max_offset: int
    last_store_timestamp: int


class MessageStore:
    def __init__(self, config: StoreConfig, store_host: str) -> None:
        self.config = config
        self._store_host = store_host
        self.commit_log = CommitLog(config.commit_log_dir, config.mapped_file_size_commit_log, config.batch_cache_bytes)
        self.index = IndexService(config.index_dir, config.index_slots_per_file)
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._queue_blocks = BlockCache(config.consume_queue_cache_bytes)
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-io")
        self._reader = ThreadPoolExecutor(max_workers=2, thread_name_prefix="store-read")
        self._reads = InFlightReads(self._reader)
        self.retention = Retention(
            config, self.commit_log, self.queues, self.index, self._reads, self._io, self._build_index
        )
        self._listeners: list[ArrivalListener] = []
        self._dispatched = 0  # commit log offset up to which consume queues and index are built
        # batches whose index entries are not built yet: building them together saves the
        # fixed cost of the Arrow kernels per batch (the index serves lookups, not pulls)
        self._unindexed: list[tuple[int, StoredBatch]] = []
        self._unindexed_rows = 0
        self._commit_log_flushed = 0
        self.duplicates = DuplicateWindow(config.duplicate_window_seconds, config.duplicate_window_max_keys)
        self.appender = CommitLogAppender(
            self.commit_log,
            config=config,
            store_host=store_host,
            io_executor=self._io,
            next_queue_offset=self._next_queue_offset,
            on_stored=self._stored,
            on_synced=self._synced,
            window=self.duplicates,
        )
        self._services = [
            PeriodicService("store-flush-consume-queue", config.flush_interval_consume_queue / 1000, self.flush_logics),
            PeriodicService(
                "store-clean-expired", config.clean_resource_interval / 1000, self.retention.delete_expired
            ),
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
        self._load_queues()
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
            self._dispatch(position, segment.start, batch)
        self._dispatched = end
        self.duplicates.recover(self.commit_log, end)
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

    def _load_queues(self) -> None:
        root = self.config.consume_queue_dir
        if not root.is_dir():
            return
        for topic_dir in root.iterdir():
            for queue_dir in topic_dir.iterdir():
                if queue_dir.name.isdigit():
                    queue = self._queue(topic_dir.name, int(queue_dir.name))
                    queue.load()

    # -- writing -------------------------------------------------------------------------------

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            queue = ConsumeQueue(
                topic,
                queue_id,
                self.config.consume_queue_dir / topic / str(queue_id),
                self.config.consume_queue_entries_per_file,
                self._queue_blocks,
            )
            self.queues[(topic, queue_id)] = queue
        return queue

    def _next_queue_offset(self, topic: str, queue_id: int) -> int:
        queue = self.queues.get((topic, queue_id))
        return queue.max_offset if queue is not None else 0

    async def put_messages(
        self, topic: str, queue_id: int, messages: list[StandardMessage], *, wait_flush: bool = True
    ) -> PutResult:
        """Store standard messages (one send or one batch send) in one queue."""
        future: asyncio.Future[PutResult] = asyncio.get_running_loop().create_future()
        self.appender.submit(AppendRequest(topic, queue_id, future, messages=messages, wait_flush=wait_flush))
        return await future

    async def put_arrow(
        self,
        topic: str,
        queue_id: int,
        batch: pa.RecordBatch,
        *,
        born_timestamp: int,
        born_host: str,
        properties: pa.StringArray | None = None,
    ) -> PutResult:
        """Store a producer's Arrow batch (PRODUCER_SCHEMA) in one queue.

        `properties`: the batch's encoded properties, when the caller built them while checking it.
        """
        future: asyncio.Future[PutResult] = asyncio.get_running_loop().create_future()
        self.appender.submit(
            AppendRequest(
                topic,
                queue_id,
                future,
                arrow=batch,
                arrow_properties=properties,
                born_timestamp=born_timestamp,
                born_host=born_host,
            )
        )
        return await future

    def _stored(self, written: Round, stored: StoredBatch, length: int) -> None:
        placement = written.placement
        assert placement is not None
        self.commit_log.register(placement, length, stored, synced=written.sync)
        if isinstance(stored, WireRecords):
            self._dispatch_sends(written, stored)
        else:
            self._dispatch(placement.position, placement.segment.start, stored)
        self._dispatched = placement.position + length

    def _dispatch_sends(self, written: Round, stored: WireRecords) -> None:
        """Add a round of standard sends to their consume queues, from the values the sends carried
        (a few numpy calls per send: these rounds are small, and Arrow's fixed costs would dominate)."""
        placement = written.placement
        assert placement is not None
        for request in written.requests:
            if not request.count:
                continue
            assert request.messages is not None
            first_row = request.first_commit_log_offset - placement.position
            entries = np.empty(request.count, dtype=CQ_ENTRY)
            entries["batch_pos"] = placement.position
            entries["row"] = np.arange(first_row, first_row + request.count)
            entries["size"] = [len(m.body) for m in request.messages]
            entries["tags_code"] = [tag_code(m.tags) for m in request.messages]
            entries["store_ts"] = written.store_timestamp
            self._append_entries(request.topic, request.queue_id, request.first_queue_offset, entries)
        self._unindexed.append((placement.segment.start, stored))
        self._unindexed_rows += stored.num_rows
        if self._unindexed_rows >= _INDEX_BATCH_ROWS:
            self._build_index()

    def _append_entries(self, topic: str, queue_id: int, first_offset: int, entries: np.ndarray) -> None:
        queue = self._queue(topic, queue_id)
        queue.append(first_offset, entries)
        for listener in self._listeners:
            listener(topic, queue_id, queue.max_offset, entries["tags_code"])

    def _synced(self, offset: int) -> None:
        self._commit_log_flushed = max(self._commit_log_flushed, offset)

    def _dispatch(self, position: int, segment_start: int, batch: pa.RecordBatch) -> None:
        """Add a stored batch to its consume queues and the index (vectorized, per queue)."""
        topics = batch.column("topic").dictionary_encode()
        queue_ids = batch.column("queue_id").to_numpy()
        keys = topics.indices.to_numpy().astype(np.int64) << 32 | queue_ids.astype(np.int64)
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        boundaries = np.flatnonzero(np.diff(sorted_keys)) + 1
        codes = tag_codes(batch.column("tags"))
        sizes = pc.binary_length(batch.column("body")).to_numpy()
        store_ts = batch.column("store_timestamp").to_numpy()
        queue_offsets = batch.column("queue_offset").to_numpy()
        dictionary = topics.dictionary.to_pylist()
        for rows in np.split(order, boundaries):
            first = int(rows[0])
            topic = dictionary[int(keys[first] >> 32)]
            queue_id = int(queue_ids[first])
            entries = np.empty(len(rows), dtype=CQ_ENTRY)
            entries["batch_pos"] = position
            entries["row"] = rows
            entries["size"] = sizes[rows]
            entries["tags_code"] = codes[rows]
            entries["store_ts"] = store_ts[rows]
            self._append_entries(topic, queue_id, int(queue_offsets[first]), entries)
        self._unindexed.append((segment_start, batch.select(INDEXED_COLUMNS)))
        self._unindexed_rows += batch.num_rows
        if self._unindexed_rows >= _INDEX_BATCH_ROWS:
            self._build_index()

    def _build_index(self) -> None:
        """Index the dispatched batches not indexed yet, one Arrow pass per segment."""
        pending, self._unindexed, self._unindexed_rows = self._unindexed, [], 0
        by_segment: dict[int, list[StoredBatch]] = {}
        for segment_start, batch in pending:
            by_segment.setdefault(segment_start, []).append(batch)
        for segment_start, stored in by_segment.items():
            batches = [batch.select(INDEXED_COLUMNS) for batch in as_batches(stored)]
            combined = batches[0] if len(batches) == 1 else pa.concat_batches(batches)
            self.index.add(segment_start, index_entries(combined))

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        self._listeners.append(listener)

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
        self._build_index()
        dispatched = self._dispatched
        queue_flushes = [p for p in (q.pending_flush() for q in self.queues.values()) if p is not None]
        lengths = {f"{topic}:{queue_id}": q.max_offset for (topic, queue_id), q in self.queues.items()}
        index_flushes = self.index.pending_flushes()
        slot_tables = self.index.tables_to_write(everything=closing)

        def write() -> None:
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

    # -- reading -------------------------------------------------------------------------------

    def max_offset(self, topic: str, queue_id: int) -> int:
        queue = self.queues.get((topic, queue_id))
        return queue.max_offset if queue else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        queue = self.queues.get((topic, queue_id))
        return queue.min_offset if queue else 0

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        queue = self.queues.get((topic, queue_id))
        return queue.offset_for_timestamp(timestamp_ms) if queue else 0

    def earliest_store_time(self, topic: str, queue_id: int) -> int:
        queue = self.queues.get((topic, queue_id))
        return queue.earliest_store_time() if queue else 0

    def store_time_at(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at `offset`, 0 when there is none."""
        queue = self.queues.get((topic, queue_id))
        if queue is None or not queue.min_offset <= offset < queue.max_offset:
            return 0
        return int(queue.entries(offset, 1)["store_ts"][0])

    def queue_stats(self, topic: str, queue_id: int) -> QueueStats:
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            return QueueStats(0, 0, 0)
        last = queue.last_entry()
        return QueueStats(queue.min_offset, queue.max_offset, int(last["store_ts"]) if last is not None else 0)

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
        adds to each body), so an answer stays within a frame.
        """
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
        scanned = queue.entries(
            offset, max(_MIN_SCAN_ENTRIES, max_messages) if tag_codes_filter is not None else max_messages
        )
        if tag_codes_filter is not None:
            candidates = np.flatnonzero(np.isin(scanned["tags_code"], np.fromiter(tag_codes_filter, np.int64)))
        else:
            candidates = np.arange(len(scanned))
        matched = candidates[:max_messages]
        if len(matched):
            sizes = scanned["size"][matched].astype(np.int64) + message_overhead
            fits = int(np.searchsorted(np.cumsum(sizes), max_bytes, side="right"))
            matched = matched[: max(1, fits)]
        # stop right after the last message taken when the limits cut the scan short
        cut = len(matched) < len(candidates)
        next_offset = offset + (int(matched[-1]) + 1 if cut else len(scanned))
        if not len(matched):
            return GetResult(GetStatus.NO_MATCHED_MESSAGE, next_offset, low, high)
        taken = scanned[matched]
        live = taken["batch_pos"] >= self.commit_log.min_offset
        taken = taken[live]
        if not len(taken):
            return GetResult(GetStatus.MESSAGE_WAS_REMOVING, next_offset, low, high)
        pieces = await self._take_rows(taken)
        return GetResult(GetStatus.FOUND, next_offset, low, high, pieces)

    async def _take_rows(self, entries: np.ndarray) -> list[Piece]:
        positions, starts = np.unique(entries["batch_pos"], return_index=True)
        rows_per_batch = np.split(entries["row"], starts[1:])
        stored = [self.commit_log.cached(int(p)) for p in positions]
        missing = [int(p) for p, b in zip(positions, stored, strict=True) if b is None]
        if missing:
            segments = [self.commit_log.segment_holding(p) for p in missing]  # on the loop: see retention.py
            loaded = await self._reads.submit(lambda: [s.read(p) for s, p in zip(segments, missing, strict=True)])
            by_position = dict(zip(missing, loaded, strict=True))
            for position, batch in by_position.items():
                self.commit_log.cache_put(position, batch)
            stored = [b if b is not None else by_position[int(p)] for p, b in zip(positions, stored, strict=True)]
        result = []
        for batch, rows in zip(stored, rows_per_batch, strict=True):
            assert batch is not None
            result.append(Piece(batch, rows))
        return result

    async def message_at(self, commit_log_offset: int) -> pa.RecordBatch | None:
        """The one-row batch of the message at `commit_log_offset` (VIEW_MESSAGE_BY_ID)."""
        located = self.commit_log.locate(commit_log_offset)
        if located is None:
            return None
        position, row = located
        return arrow_batches([Piece(await self._batch_at(position), np.array([row]))])[0]

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
    ) -> list[pa.RecordBatch]:
        """Messages of `topic` whose KEYS contain `key` (or whose msgId is `key`), newest first."""
        self._build_index()
        found: list[pa.RecordBatch] = []
        for offset in self.index.lookup(topic, key, begin_ms, end_ms, max_num * 4):
            message = await self.message_at(offset)
            if message is None or message.column("topic")[0].as_py() != topic:
                continue
            if unique_key:
                matches = message.column("msg_id")[0].as_py() == key
            else:
                keys = message.column("keys")[0].as_py() or ""
                matches = key in keys.split(" ") or message.column("msg_id")[0].as_py() == key
            if matches:
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

        await asyncio.get_running_loop().run_in_executor(self._io, delete_files)
        await self.flush_logics()  # the checkpoint must stop vouching for the deleted queues
