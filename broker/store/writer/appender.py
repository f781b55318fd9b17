"""Group commit: the one writer of the commit log.

Sends wait in a queue. The writer takes everything waiting (up to the configured batch limits) as
one commit round, assigns queue offsets and commit log offsets, builds ONE stored batch from all
of it (RocketMQ's message records when the round holds standard sends only, else an Arrow record
batch), writes it (and, under SYNC_FLUSH, fsyncs it) in the store's I/O thread, or on the loop for
a few records under ASYNC_FLUSH, has the store make it visible to pulls (:class:`CommitTarget`),
and only then answers every send of the round. While one commit round is on disk the next one
gathers, so concurrent senders share a record batch and an fsync, and a lone sender pays no
batching delay. Each attempt at a commit round first drops the rows the duplicate window already
holds, checking the unchanged requests afresh (broker/store/duplicates/checker.py,
broker/store/writer/commit_round.py).

Back-pressure, as RocketMQ's send thread pool: a send is answered SYSTEM_BUSY at once when the
queue already holds `sendThreadPoolQueueCapacity` sends or `sendQueueMaxBytes` body bytes, and
when it waited `waitTimeMillsInSendQueue` without joining a round. A refused send stores nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from concurrent.futures import Executor
from itertools import accumulate

import numpy as np
import pyarrow as pa

from broker.store.config import FlushDiskType, StoreConfig
from broker.store.duplicates.checker import DuplicateChecker
from broker.store.log import record
from broker.store.log.commitlog import CommitLog
from broker.store.log.stored import StoredBatch, WireRecords
from broker.store.results import PutStatus
from broker.store.writer.append_requests import AppendRequest, StandardMessage
from broker.store.writer.commit_round import CommitRound, CommitSend, CommitTarget
from rocketspark.aio import wait_until
from rocketspark.errors import RocketMQError
from rocketspark.message.batches.stored import stored_batch_from_producer, stored_batch_from_rows
from rocketspark.message.records.scalar import encode_record
from rocketspark.protocol.codes import ResponseCode

log = logging.getLogger(__name__)

# Commit rounds of at most this many standard messages are encoded and written on the loop under
# ASYNC_FLUSH: a write that only copies a few kilobytes to the page cache beats a thread hop.
_WRITE_ON_LOOP_ROWS = 64


class CommitLogAppender:
    """The writer: its queue of sends, and the commit rounds it makes of them (event loop)."""

    def __init__(
        self,
        commit_log: CommitLog,
        *,
        config: StoreConfig,
        store_host: str,
        io_executor: Executor,
        duplicates: DuplicateChecker,
        target: CommitTarget,
    ) -> None:
        """`duplicates`: the duplicate window's entry point; `target`: the store, which gives queue
        offsets and makes written commit rounds visible."""
        self._commit_log = commit_log
        self._config = config
        self.store_host = store_host
        self._executor = io_executor
        self._duplicates = duplicates
        self._target = target
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
        if request.arrow is not None:
            request.key_hashes = self._duplicates.prepare(request)  # now, while the round before is on disk
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
        """Answer SYSTEM_BUSY to sends that waited too long for a commit round (RocketMQ's cleanExpiredRequest)."""
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
        """Write a commit round; if writing it fails, write its halves as rounds of their own.

        Processors check every send before it joins a round, so a failure here is unexpected (a
        disk error, or a check that is missing). Splitting keeps it to the requests that cause it:
        one bad request among n costs about 2 log2(n) extra rounds, and the others still succeed.
        Nothing of a failed round was made visible, so its requests are simply checked for
        duplicates and placed again (each half on its own: a row of one half is never taken for a
        duplicate of a row of the other, which may be refused).
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
    ) -> tuple[CommitRound, StoredBatch, int, PutStatus]:
        """Place, build, write (and fsync) a commit round; nothing of it is visible yet."""
        store_timestamp = int(time.time() * 1000)
        loop = asyncio.get_running_loop()
        checked = await self._duplicates.check(requests, store_timestamp)
        sends = [CommitSend.of(r, d) for r, d in zip(requests, checked.sends, strict=True)]
        if not any(s.count for s in sends):  # duplicates only: nothing to write
            return CommitRound(None, sends, checked, store_timestamp, False), pa.record_batch({}), 0, PutStatus.PUT_OK
        placement = self._commit_log.reserve()
        next_offsets: dict[tuple[str, int], int] = {}
        row = 0
        for send in sends:
            key = (send.topic, send.queue_id)
            first = next_offsets.get(key)
            if first is None:
                first = self._target.next_queue_offset(*key)
            send.first_queue_offset = first
            next_offsets[key] = first + send.count
            send.first_commit_log_offset = placement.position + row
            row += send.count
        sync = self._config.flush_disk_type is FlushDiskType.SYNC_FLUSH and any(r.wait_flush for r in requests)
        wire = all(s.messages is not None for s in sends if s.count)
        current = CommitRound(placement, sends, checked, store_timestamp, sync, wire)
        if wire and not sync and row <= _WRITE_ON_LOOP_ROWS:
            # a few records: encoding them and a write to the page cache cost less than a thread hop
            return (current, *self._build_and_write(current), PutStatus.PUT_OK)
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

    def _complete(self, current: CommitRound, batch: StoredBatch, length: int, status: PutStatus) -> None:
        """Make a written commit round visible and answer its sends."""
        placement = current.placement
        if placement is not None:
            self.rounds += 1
            if current.sync:
                self.fsyncs += 1
            self._target.commit_round_written(current, batch, length)
        for send in current.sends:
            if not send.request.future.done():
                send.request.future.set_result(send.result(status, current.sends))
        if placement is not None:
            # after the answers: the next round, which looks keys up, starts later
            current.checked.remember(current.store_timestamp, [s.first_stored for s in current.sends])

    def _build_and_write(self, current: CommitRound) -> tuple[StoredBatch, int]:
        """Build the commit round's stored batch and write it (I/O thread, or the loop for a few records)."""
        assert current.placement is not None
        stored: StoredBatch
        if current.wire:
            stored = self._wire_records(current)
            header, payload = record.encode_wire(stored.payload, stored.num_rows)
        else:
            stored = self._build(current)
            header, payload = record.encode(stored)
        CommitLog.write(current.placement, header, payload)
        if current.sync:
            self._commit_log.sync(current.to_sync)
        return stored, len(header) + len(memoryview(payload))

    def _wire_records(self, current: CommitRound) -> WireRecords:
        """The records of a commit round of standard sends, as standard pulls will return them."""
        records: list[bytes] = []
        for send in current.sends:
            for i, message in enumerate(send.messages or ()):
                records.append(
                    encode_record(
                        topic=send.topic,
                        queue_id=send.queue_id,
                        queue_offset=send.first_queue_offset + i,
                        commit_log_offset=send.first_commit_log_offset + i,
                        body=message.body,
                        properties=message.properties,
                        flag=message.flag,
                        sys_flag=message.sys_flag,
                        born_timestamp=message.born_timestamp,
                        born_host=message.born_host,
                        store_timestamp=current.store_timestamp,
                        store_host=self.store_host,
                        reconsume_times=message.reconsume_times,
                    )
                )
        # accumulate in Python: a round of single sends holds a few records, where numpy's cumsum
        # of a list costs more than the sums
        bounds = np.fromiter(accumulate(map(len, records), initial=0), dtype=np.int64, count=len(records) + 1)
        return WireRecords(b"".join(records), bounds)

    def _build(self, current: CommitRound) -> pa.RecordBatch:
        pieces: list[pa.RecordBatch] = []
        run: list[CommitSend] = []
        for send in current.sends:
            if not send.count:  # duplicates only
                continue
            if send.messages is not None:
                run.append(send)
                continue
            if run:
                pieces.append(self._standard_piece(run, current.store_timestamp))
                run = []
            assert send.arrow is not None
            standard = send.request.standard
            pieces.append(
                stored_batch_from_producer(
                    send.arrow,
                    topic=send.topic,
                    queue_id=send.queue_id,
                    first_queue_offset=send.first_queue_offset,
                    first_commit_log_offset=send.first_commit_log_offset,
                    born_timestamp=send.request.born_timestamp,
                    born_host=send.request.born_host,
                    store_timestamp=current.store_timestamp,
                    store_host=self.store_host,
                    properties=send.arrow_properties,
                    flag=0 if send.arrow_flags is None else send.arrow_flags,
                    sys_flag=0 if standard is None else standard.sys_flag,
                    reconsume_times=0 if standard is None else standard.reconsume_times,
                )
            )
        if run:
            pieces.append(self._standard_piece(run, current.store_timestamp))
        return pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)

    def _standard_piece(self, sends: list[CommitSend], store_timestamp: int) -> pa.RecordBatch:
        """One batch for a run of standard sends: every message each stores, in order."""
        topics: list[str] = []
        queue_ids: list[int] = []
        queue_offsets: list[int] = []
        messages: list[StandardMessage] = []
        for send in sends:
            assert send.messages is not None
            n = len(send.messages)
            topics.extend([send.topic] * n)
            queue_ids.extend([send.queue_id] * n)
            queue_offsets.extend(range(send.first_queue_offset, send.first_queue_offset + n))
            messages.extend(send.messages)
        return stored_batch_from_rows(
            topics=topics,
            queue_ids=queue_ids,
            queue_offsets=queue_offsets,
            first_commit_log_offset=sends[0].first_commit_log_offset,
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


def _busy(reason: str, *, timeout: bool = False) -> RocketMQError:
    """RocketMQ's answer when the store cannot keep up; clients retry it after a pause."""
    prefix = "[TIMEOUT_CLEAN_QUEUE]broker busy" if timeout else "[OVERLOAD]system busy"
    return RocketMQError(f"{prefix}, start flow control for a while: {reason}", code=ResponseCode.SYSTEM_BUSY)
