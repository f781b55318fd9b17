"""Group commit: the one writer of the commit log.

Sends wait in a queue. The writer takes everything waiting (up to the configured batch limits),
assigns queue offsets and commit log offsets, builds ONE stored record batch from all of it, writes
it (and, under SYNC_FLUSH, fsyncs it) in the store's I/O thread, makes it visible to pulls, and
only then answers every send of the round. While one round is on disk the next one gathers, so
concurrent senders share a record batch and an fsync, and a lone sender pays no batching delay.

Back-pressure, as RocketMQ's send thread pool: a send is answered SYSTEM_BUSY at once when the
queue already holds `sendThreadPoolQueueCapacity` sends or `sendQueueMaxBytes` body bytes, and
when it waited `waitTimeMillsInSendQueue` without joining a round. A refused send stores nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from broker.store import record
from broker.store.commitlog import CommitLog, Placement, Segment
from broker.store.config import FlushDiskType, StoreConfig
from broker.store.dedup import DuplicateWindow, StoredAt, deduplicated_topic, key_hashes
from broker.store.results import PutResult, PutStatus
from rocketspark.aio import wait_until
from rocketspark.errors import RocketMQError
from rocketspark.message.stored_batches import stored_batch_from_producer, stored_batch_from_rows
from rocketspark.remoting.codes import ResponseCode

log = logging.getLogger(__name__)

# Rounds of at least this many rows are checked for duplicates in the I/O thread, beside the event
# loop (numpy lets go of the GIL); smaller ones on the loop, where a thread hop would cost more.
_DEDUPLICATE_IN_IO_THREAD_ROWS = 2048


@dataclass(frozen=True, slots=True)
class StandardMessage:
    """One message of a standard send, as its request carried it."""

    body: bytes
    properties: str  # RocketMQ's encoded form, system properties included
    tags: str | None = None  # from the properties, parsed by the processor
    keys: str | None = None
    uniq_key: str | None = None
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = ""
    reconsume_times: int = 0
    wait_store_ok: bool = True


@dataclass(eq=False)
class AppendRequest:
    """Messages for one queue: standard messages (one or a batch), or one producer Arrow batch."""

    topic: str
    queue_id: int
    future: asyncio.Future[PutResult]
    messages: list[StandardMessage] | None = None
    arrow: pa.RecordBatch | None = None  # PRODUCER_SCHEMA
    arrow_properties: pa.StringArray | None = None  # encode_properties_column of `arrow`, when checked already
    born_timestamp: int = 0  # for Arrow batches: the send's born time and host apply to every row
    born_host: str = ""
    wait_flush: bool = True
    enqueued_at: float = field(default=0.0, init=False)  # event loop time
    first_queue_offset: int = field(default=0, init=False)
    first_commit_log_offset: int = field(default=0, init=False)
    # duplicate detection, set once when the request first joins a round
    deduplicated: bool = field(default=False, init=False)
    kept: np.ndarray | None = field(default=None, init=False)  # rows of the send stored (None: all)
    duplicate_of: dict[int, StoredAt | tuple[AppendRequest, int]] = field(default_factory=dict, init=False)
    new_hashes: np.ndarray | None = field(default=None, init=False)  # key hashes of stored rows with a key
    new_rows: np.ndarray | None = field(default=None, init=False)  # their rows among the stored ones
    key_hashes: tuple[np.ndarray, np.ndarray] | None = field(default=None, init=False)  # Arrow: when submitted

    @property
    def count(self) -> int:
        if self.messages is not None:
            return len(self.messages)
        assert self.arrow is not None
        return int(self.arrow.num_rows)

    @property
    def body_bytes(self) -> int:
        if self.messages is not None:
            return sum(len(m.body) for m in self.messages)
        assert self.arrow is not None
        return int(self.arrow.column("body").nbytes or 0)


@dataclass(slots=True)
class Round:
    placement: Placement | None  # None: the round's sends were all duplicates, nothing is written
    requests: list[AppendRequest]
    store_timestamp: int
    sync: bool
    # under SYNC_FLUSH: every segment with records not fsynced yet (earlier rounds that did not
    # wait for the disk, possibly in an older segment) and the round's own, all fsynced with it,
    # so that the flushed offset at the round's end covers nothing that is not on disk
    to_sync: list[Segment] = field(default_factory=list)


class CommitLogAppender:
    def __init__(
        self,
        commit_log: CommitLog,
        *,
        config: StoreConfig,
        store_host: str,
        io_executor: Executor,
        next_queue_offset: Callable[[str, int], int],
        on_stored: Callable[[Placement, int, pa.RecordBatch, bool], None],
        on_synced: Callable[[int], None],
        window: DuplicateWindow | None = None,
    ) -> None:
        self._commit_log = commit_log
        self._config = config
        self.store_host = store_host
        self._executor = io_executor
        self._next_queue_offset = next_queue_offset
        self._on_stored = on_stored
        self._on_synced = on_synced
        self._window = window
        self._pending: deque[AppendRequest] = deque()
        self._pending_bytes = 0
        self._expiry: asyncio.TimerHandle | None = None
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.rounds = 0
        self.fsyncs = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="commit-log-appender")

    async def stop(self) -> None:
        """Finish every accepted request, then stop."""
        task = self._task
        if task is None:
            return
        self._stopping = True
        self._wakeup.set()
        await task
        self._task = None
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    def submit(self, request: AppendRequest) -> None:
        """Queue a request for the next round; RocketMQError(SYSTEM_BUSY) when the queue is full."""
        if self._task is None or self._stopping:
            raise RuntimeError("the message store is not running")
        config = self._config
        if len(self._pending) >= config.send_thread_pool_queue_capacity:
            raise _busy(f"{len(self._pending)} sends wait for the disk (sendThreadPoolQueueCapacity)")
        if self._pending and self._pending_bytes + request.body_bytes > config.send_queue_max_bytes:
            raise _busy(
                f"{self._pending_bytes:,} body bytes wait for the disk; this send's {request.body_bytes:,} would "
                f"pass sendQueueMaxBytes={config.send_queue_max_bytes:,}"
            )
        window = self._window
        if request.arrow is not None and window is not None and window.enabled and deduplicated_topic(request.topic):
            request.key_hashes = _arrow_key_hashes(request)  # now, while the round before is on disk
        loop = asyncio.get_running_loop()
        request.enqueued_at = loop.time()
        self._pending.append(request)
        self._pending_bytes += request.body_bytes
        if self._expiry is None:
            self._expiry = loop.call_at(request.enqueued_at + self._max_wait_s, self._expire_waiting)
        self._wakeup.set()

    @property
    def _max_wait_s(self) -> float:
        return self._config.wait_time_mills_in_send_queue / 1000

    def _expire_waiting(self) -> None:
        """Answer SYSTEM_BUSY to sends that waited too long for a round (RocketMQ's cleanExpiredRequest)."""
        self._expiry = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self._pending and now - self._pending[0].enqueued_at >= self._max_wait_s:
            request = self._pending.popleft()
            self._pending_bytes -= request.body_bytes
            waited_ms = (now - request.enqueued_at) * 1000
            if not request.future.done():  # else its sender is gone
                request.future.set_exception(
                    _busy(f"period in queue: {waited_ms:.0f}ms, size of queue: {len(self._pending) + 1}", timeout=True)
                )
        if self._pending:
            self._expiry = loop.call_at(self._pending[0].enqueued_at + self._max_wait_s, self._expire_waiting)

    async def _run(self) -> None:
        while True:
            while self._pending:
                await self._write_round(self._take_round())
            if self._stopping:
                return
            await self._wakeup.wait()
            self._wakeup.clear()

    def _take_round(self) -> list[AppendRequest]:
        requests: list[AppendRequest] = []
        messages = body_bytes = 0
        while self._pending:
            request = self._pending[0]
            if requests and (
                messages + request.count > self._config.max_group_commit_messages
                or body_bytes + request.body_bytes > self._config.max_group_commit_bytes
            ):
                break
            requests.append(self._pending.popleft())
            self._pending_bytes -= request.body_bytes
            messages += request.count
            body_bytes += request.body_bytes
        return requests

    async def _write_round(self, requests: list[AppendRequest]) -> None:
        """Commit a round; if writing it fails, write its halves as rounds of their own.

        Processors check every send before it joins a round, so a failure here is unexpected (a
        disk error, or a check that is missing). Splitting keeps it to the requests that cause it:
        one bad request among n costs about 2 log2(n) extra rounds, and the others still succeed.
        Nothing of a failed round was made visible, so its requests are simply placed again.
        """
        try:
            written = await self._build_and_write_round(requests)
        except Exception as exc:
            if len(requests) == 1:
                log.exception("writing a %d-message send to the commit log failed", requests[0].count)
                self._fail(requests, exc)
                return
            log.warning("writing a round of %d sends failed (%r); writing each half on its own", len(requests), exc)
            middle = len(requests) // 2
            await self._write_round(requests[:middle])
            await self._write_round(requests[middle:])
            return
        try:
            self._complete(*written)
        except Exception as exc:  # a bug: the round may be partly visible, so it is not written again
            log.exception("making a written round of %d sends visible failed", len(requests))
            self._fail(requests, exc)

    async def _build_and_write_round(
        self, requests: list[AppendRequest]
    ) -> tuple[Round, pa.RecordBatch, int, PutStatus]:
        """Place, build, write (and fsync) a round; nothing of it is visible yet."""
        store_timestamp = int(time.time() * 1000)
        loop = asyncio.get_running_loop()
        if sum(r.count for r in requests) >= _DEDUPLICATE_IN_IO_THREAD_ROWS:
            await loop.run_in_executor(self._executor, self._deduplicate, requests, store_timestamp)
        else:
            self._deduplicate(requests, store_timestamp)
        if not any(r.count for r in requests):  # duplicates only: nothing to write
            return Round(None, requests, store_timestamp, False), pa.record_batch({}), 0, PutStatus.PUT_OK
        placement = self._commit_log.reserve()
        next_offsets: dict[tuple[str, int], int] = {}
        row = 0
        for request in requests:
            key = (request.topic, request.queue_id)
            first = next_offsets.get(key)
            if first is None:
                first = self._next_queue_offset(*key)
            request.first_queue_offset = first
            next_offsets[key] = first + request.count
            request.first_commit_log_offset = placement.position + row
            row += request.count
        sync = self._config.flush_disk_type is FlushDiskType.SYNC_FLUSH and any(r.wait_flush for r in requests)
        current = Round(placement, requests, store_timestamp, sync)
        earlier = self._commit_log.take_unflushed() if sync else []
        if sync:
            current.to_sync = [*(s for s in earlier if s is not placement.segment), placement.segment]
        write = loop.run_in_executor(self._executor, self._build_and_write, current)
        status = PutStatus.PUT_OK
        try:
            if sync and not await wait_until(write, self._config.sync_flush_timeout / 1000):
                log.warning("fsync took longer than syncFlushTimeout=%d ms", self._config.sync_flush_timeout)
                status = PutStatus.FLUSH_DISK_TIMEOUT
            batch, length = await write
        except BaseException:
            self._commit_log.restore_unflushed(earlier)
            raise
        return current, batch, length, status

    def _complete(self, current: Round, batch: pa.RecordBatch, length: int, status: PutStatus) -> None:
        """Make a written round visible and answer its sends."""
        placement = current.placement
        if placement is not None:
            self.rounds += 1
            if current.sync:
                self.fsyncs += 1
                self._on_synced(placement.position + length)
            self._on_stored(placement, length, batch, current.sync)
        for request in current.requests:
            if not request.future.done():
                request.future.set_result(_put_result(request, status))
        if placement is not None:
            self._remember(current)  # after the answers: the next round, which looks keys up, starts later

    def _deduplicate(self, requests: list[AppendRequest], now_ms: int) -> None:
        """Drop the rows whose UNIQ_KEY was stored within the window, or earlier in this round.

        The whole round is hashed and looked up at once; Python runs per send only to hand out the
        results, and per row only for the duplicates.
        """
        window = self._window
        if window is None or not window.enabled:
            return
        sends = [r for r in requests if not r.deduplicated and deduplicated_topic(r.topic)]
        if not sends:
            return
        for send in sends:
            send.deduplicated = True
        counts = np.fromiter((r.count for r in sends), dtype=np.int64, count=len(sends))
        hashes, present = _round_key_hashes(sends)
        if not present.any():
            return
        starts = np.cumsum(counts) - counts
        keyed = np.flatnonzero(present)  # rows of the round that carry a key
        send_of = np.searchsorted(starts, keyed, side="right") - 1
        rows = keyed - starts[send_of]  # each keyed row's row within its send
        hashes = hashes[keyed]
        found = window.lookup(hashes, now_ms)
        first_row = _first_rows(hashes)
        duplicate = found.hit if first_row is None else found.hit | (first_row != np.arange(len(hashes)))
        for j in np.flatnonzero(duplicate).tolist():
            send = sends[send_of[j]]
            if found.hit[j]:
                send.duplicate_of[int(rows[j])] = found.at(j)
            else:  # a later row of a key new in this round
                assert first_row is not None
                k = first_row[j]
                send.duplicate_of[int(rows[j])] = (sends[send_of[k]], int(rows[k]))
        for send in sends:
            if send.duplicate_of:
                _drop_rows(send)
        new = ~duplicate
        new_send, new_rows, new_hashes = send_of[new], rows[new], hashes[new]
        bounds = np.searchsorted(new_send, np.arange(len(sends) + 1))
        for i, send in enumerate(sends):
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            if lo == hi:
                continue
            send.new_hashes = new_hashes[lo:hi]
            send.new_rows = new_rows[lo:hi] if send.kept is None else np.searchsorted(send.kept, new_rows[lo:hi])

    def _remember(self, current: Round) -> None:
        """Add the keys a written round stored to the duplicate window."""
        window = self._window
        keyed = [r for r in current.requests if r.new_hashes is not None and len(r.new_hashes)]
        if window is None or not keyed:
            return
        rows = np.concatenate([r.new_rows for r in keyed])
        counts = [len(r.new_hashes) for r in keyed]  # type: ignore[arg-type]

        def per_row(values: list[int]) -> np.ndarray:
            return np.repeat(np.array(values, dtype=np.int64), counts)

        window.add(
            current.store_timestamp,
            np.concatenate([r.new_hashes for r in keyed]),
            per_row([r.queue_id for r in keyed]),
            per_row([r.first_queue_offset for r in keyed]) + rows,
            per_row([r.first_commit_log_offset for r in keyed]) + rows,
        )

    def _build_and_write(self, current: Round) -> tuple[pa.RecordBatch, int]:
        """Build the round's stored batch and write it (I/O thread)."""
        assert current.placement is not None
        batch = self._build(current)
        header, payload = record.encode(batch)
        CommitLog.write(current.placement, header, payload)
        if current.sync:
            self._commit_log.sync(current.to_sync)
        return batch, len(header) + payload.size

    def _build(self, current: Round) -> pa.RecordBatch:
        pieces: list[pa.RecordBatch] = []
        run: list[AppendRequest] = []
        for request in current.requests:
            if not request.count:  # duplicates only
                continue
            if request.messages is not None:
                run.append(request)
                continue
            if run:
                pieces.append(self._standard_piece(run, current.store_timestamp))
                run = []
            assert request.arrow is not None
            pieces.append(
                stored_batch_from_producer(
                    request.arrow,
                    topic=request.topic,
                    queue_id=request.queue_id,
                    first_queue_offset=request.first_queue_offset,
                    first_commit_log_offset=request.first_commit_log_offset,
                    born_timestamp=request.born_timestamp,
                    born_host=request.born_host,
                    store_timestamp=current.store_timestamp,
                    store_host=self.store_host,
                    properties=request.arrow_properties,
                )
            )
        if run:
            pieces.append(self._standard_piece(run, current.store_timestamp))
        return pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)

    def _standard_piece(self, requests: list[AppendRequest], store_timestamp: int) -> pa.RecordBatch:
        """One batch for a run of standard sends: every message of every request, in order."""
        topics: list[str] = []
        queue_ids: list[int] = []
        queue_offsets: list[int] = []
        messages: list[StandardMessage] = []
        for request in requests:
            assert request.messages is not None
            n = len(request.messages)
            topics.extend([request.topic] * n)
            queue_ids.extend([request.queue_id] * n)
            queue_offsets.extend(range(request.first_queue_offset, request.first_queue_offset + n))
            messages.extend(request.messages)
        return stored_batch_from_rows(
            topics=topics,
            queue_ids=queue_ids,
            queue_offsets=queue_offsets,
            first_commit_log_offset=requests[0].first_commit_log_offset,
            store_timestamp=store_timestamp,
            store_host=self.store_host,
            bodies=[m.body for m in messages],
            properties=[m.properties for m in messages],
            tags=[m.tags for m in messages],
            keys=[m.keys for m in messages],
            uniq_keys=[m.uniq_key for m in messages],
            flags=[m.flag for m in messages],
            sys_flags=[m.sys_flag for m in messages],
            born_timestamps=[m.born_timestamp for m in messages],
            born_hosts=[m.born_host for m in messages],
            reconsume_times=[m.reconsume_times for m in messages],
        )

    def _fail(self, requests: list[AppendRequest], exc: BaseException) -> None:
        for request in requests:
            if not request.future.done():
                request.future.set_exception(exc)


def _first_rows(hashes: np.ndarray) -> np.ndarray | None:
    """For each hash, the first row with that hash; None when no hash repeats (the usual case,
    which a sort tells five times faster than np.unique)."""
    ordered = np.sort(hashes)
    if not (ordered[1:] == ordered[:-1]).any():
        return None
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    result: np.ndarray = first[inverse]
    return result


def _round_key_hashes(sends: list[AppendRequest]) -> tuple[np.ndarray, np.ndarray]:
    """The key hashes of every row of `sends`, in order, and which rows have a key: Arrow sends
    bring theirs (hashed when submitted), standard sends are hashed here all at once."""
    standard = [s for s in sends if s.messages is not None]
    if standard:
        keys = pa.array([m.uniq_key for s in standard for m in s.messages or ()], pa.string())
        standard_hashes, standard_present = key_hashes([s.topic for s in standard], [s.count for s in standard], keys)
    hashes: list[np.ndarray] = []
    present: list[np.ndarray] = []
    at = 0
    for send in sends:
        if send.messages is not None:
            hashes.append(standard_hashes[at : at + send.count])
            present.append(standard_present[at : at + send.count])
            at += send.count
        else:
            send_hashes, send_present = send.key_hashes or _arrow_key_hashes(send)
            hashes.append(send_hashes)
            present.append(send_present)
    if len(hashes) == 1:
        return hashes[0], present[0]
    return np.concatenate(hashes), np.concatenate(present)


def _arrow_key_hashes(send: AppendRequest) -> tuple[np.ndarray, np.ndarray]:
    assert send.arrow is not None
    return key_hashes([send.topic], [send.count], send.arrow.column("uniq_key").cast(pa.string()))


def _drop_rows(send: AppendRequest) -> None:
    """Keep only the rows of `send` that are not duplicates."""
    keep = np.ones(send.count, dtype=bool)
    keep[list(send.duplicate_of)] = False
    send.kept = np.flatnonzero(keep)
    if send.messages is not None:
        send.messages = [send.messages[i] for i in send.kept.tolist()]
        return
    assert send.arrow is not None
    mask = pa.array(keep)
    send.arrow = send.arrow.filter(mask)
    if send.arrow_properties is not None:
        send.arrow_properties = send.arrow_properties.filter(mask)


def _position(request: AppendRequest, row: int) -> StoredAt:
    """Where row `row` of a send placed in this round went."""
    index = row if request.kept is None else int(np.searchsorted(request.kept, row))
    return StoredAt(request.queue_id, request.first_queue_offset + index, request.first_commit_log_offset + index)


def _put_result(request: AppendRequest, status: PutStatus) -> PutResult:
    if not request.duplicate_of:
        return PutResult(
            status, request.queue_id, request.first_queue_offset, request.count, request.first_commit_log_offset
        )
    duplicates = {
        row: where if isinstance(where, StoredAt) else _position(*where) for row, where in request.duplicate_of.items()
    }
    row_offsets = None
    if request.messages is not None:
        total = request.count + len(duplicates)
        row_offsets = tuple(
            duplicates[row].commit_log_offset if row in duplicates else _position(request, row).commit_log_offset
            for row in range(total)
        )
    if request.count:
        first = StoredAt(request.queue_id, request.first_queue_offset, request.first_commit_log_offset)
    else:
        first = duplicates[0]
    return PutResult(
        status, first.queue_id, first.queue_offset, request.count, first.commit_log_offset, len(duplicates), row_offsets
    )


def _busy(reason: str, *, timeout: bool = False) -> RocketMQError:
    """RocketMQ's answer when the store cannot keep up; clients retry it after a pause."""
    prefix = "[TIMEOUT_CLEAN_QUEUE]broker busy" if timeout else "[OVERLOAD]system busy"
    return RocketMQError(f"{prefix}, start flow control for a while: {reason}", code=ResponseCode.SYSTEM_BUSY)
