"""The timer service: stores parked timer messages in their real queues at their time.

Timer messages wait in queue 0 of rmq_sys_wheel_timer (broker/schedule/timers.py), whose consume
queue entries carry their due times. The service keeps the entries not acted on yet in an index by
due time (broker/schedule/timer_index.py), learns of new ones as they are stored (an arrival
listener of the store), and wakes at the next due time: a message is stored in its real queue a few
ms after it is due, not on a polling tick. It also runs every second, to retry what failed, to park
again (roll) the messages that waited half of fileReservedTime or timerRollWindowSlot, so that
retention never deletes a message before it is due, and to write its progress
(broker/schedule/timer_progress.py), which it also writes after every step that stored something.

At start-up the index is rebuilt from the queue's entries from the first one not acted on: at most
the messages parked within one roll window, read 32 bytes each (docs/operations.md gives figures),
and what the service stored after its last progress write is found in the commit log, so nothing
is delivered twice or lost across a restart or a kill -9.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

import numpy as np

from broker.schedule.delivery import store_due
from broker.schedule.timer_index import TimerIndex
from broker.schedule.timer_progress import TimerProgress
from broker.schedule.timers import due_message, rolled_message
from broker.store.log.stored import arrow_batches
from broker.store.message_store import MessageStore
from broker.store.queues.consume_queue import CQ_ENTRY
from broker.store.writer.append_requests import StandardMessage
from rocketspark.errors import RocketMQError
from rocketspark.fileutil import AtomicFileWriter
from rocketspark.message.validation import TIMER_TOPIC
from rocketspark.service import PeriodicService

log = logging.getLogger(__name__)

TICK_S = 1.0
#: due messages stored in one step (a step's reads and writes are a few store calls)
_STEP_MESSAGES = 1024
#: queue entries read at once at start-up, and when looking for messages to roll
_SCAN_ENTRIES = 65_536
_ROLL_SCAN_ENTRIES = 1024

Entry = tuple[int, int]  # (due ms, offset in the timer topic's queue)


def _now_ms() -> int:
    return int(time.time() * 1000)


class TimerMessageService:
    def __init__(self, store: MessageStore, writer: AtomicFileWriter, *, roll_after_ms: int) -> None:
        """`roll_after_ms`: how long a message waits parked before it is parked again."""
        self._store = store
        self._writer = writer
        self._roll_after_ms = roll_after_ms
        self.progress = TimerProgress(writer)
        self.index = TimerIndex()
        self._known = 0  # every offset of the queue below this is in the index or acted on
        self._service = PeriodicService("deliver-timer-messages", TICK_S, self.tick)
        self._wake: asyncio.TimerHandle | None = None
        self._wake_due = math.inf
        self._persisted_at = 0.0

    async def load(self) -> None:
        """Rebuild the index from the queue and the progress (after the store recovered, before the
        broker serves)."""
        started = time.monotonic()
        self._store.add_arrival_listener(self._arrived)
        progress = self.progress
        progress.load()
        low, high = self._store.min_offset(TIMER_TOPIC, 0), self._store.max_offset(TIMER_TOPIC, 0)
        self._known = high
        if low > progress.roll_next:
            log.warning("%d timer messages were deleted before they were due", low - progress.roll_next)
            progress.roll_next = low
        if progress.watermark is None and high > progress.roll_next:
            log.warning("timerProgress.json is missing: the parked timer messages may be delivered again")
        offsets, dues, positions, _ = await self._entries(progress.roll_next, high)
        acted = progress.acted_at_start(offsets, dues, positions)
        found = progress.stored_since(self._store.commit_log)
        if found:
            was_found = np.isin(offsets, np.fromiter(found, np.int64, len(found))) & ~acted
            progress.done(list(zip(dues[was_found].tolist(), offsets[was_found].tolist(), strict=True)))
            acted |= was_found
            log.info("%d timer messages found stored after the last progress write: not stored again", len(found))
        pending = ~acted
        late = pending & (dues <= progress.through_ms)  # stored after the last write, or late then
        progress.late.update(zip(offsets[late].tolist(), dues[late].tolist(), strict=True))
        self.index.add_many(dues[pending], offsets[pending])
        took = time.monotonic() - started
        log.info("%d timer messages parked (%d entries read) in %.2f s", len(self.index), len(offsets), took)
        self._persist()

    async def _entries(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Offsets, due times, commit log positions and store times of the queue's entries from
        `start` (or its first offset) to `end`."""
        begin = position = max(start, self._store.min_offset(TIMER_TOPIC, 0))
        parts = []
        while position < end:
            entries = await self._store.queue_entries(TIMER_TOPIC, 0, position, min(end - position, _SCAN_ENTRIES))
            if not len(entries):
                break
            parts.append(entries)
            position += len(entries)
        entries = np.concatenate(parts) if parts else np.empty(0, CQ_ENTRY)
        offsets = np.arange(begin, begin + len(entries), dtype=np.int64)
        return offsets, entries["tags_code"], entries["batch_pos"], entries["store_ts"]

    def start(self) -> None:
        self._service.start()
        self._arm()

    async def stop(self) -> None:
        if self._wake is not None:
            self._wake.cancel()
        await self._service.stop()
        self.progress.persist(None)  # a step may have been cut short: its stores are found again
        await self._writer.flush()

    def _arrived(self, topic: str, queue_id: int, max_offset: int, codes: np.ndarray) -> None:
        """The store's arrival listener: new entries of the timer queue join the index."""
        if topic != TIMER_TOPIC or queue_id != 0 or max_offset <= self._known:
            return
        first = max_offset - len(codes)
        for i, due in enumerate(codes.tolist()):
            if first + i >= self._known:
                self.index.add(due, first + i)
                self.progress.stored(first + i, due)
        self._known = max_offset
        self._arm()

    def _arm(self) -> None:
        """Wake the service when the next message is due."""
        due = self.index.next_due()
        if due is None or due >= self._wake_due:
            return
        if self._wake is not None:
            self._wake.cancel()
        self._wake_due = due
        self._wake = asyncio.get_running_loop().call_later(max(0.0, (due - _now_ms()) / 1000), self._woken)

    def _woken(self) -> None:
        self._wake, self._wake_due = None, math.inf
        self._service.trigger()

    async def tick(self) -> None:
        """Store every message due now, roll those that waited long, write the progress."""
        now = _now_ms()
        changed = False
        while step := self.index.pop_due(now, _STEP_MESSAGES):
            done, failed = await self._deliver([e for e in step if not self.progress.acted(e[1], e[0])])
            for due, offset in failed:
                self.index.add(due, offset)
            self._advance(now, done)
            self._persist()
            changed = True
            if failed:
                break
        changed = await self._roll(now) or changed
        self._advance(now, [])
        moved = self.progress.watermark != self._store.commit_log.max_offset
        if changed or (moved and time.monotonic() - self._persisted_at >= TICK_S):
            self._persist()
        self._arm()

    def _advance(self, now: int, done: list[Entry]) -> None:
        """Move `through_ms` up to the next entry not acted on, then count `done`."""
        following = self.index.next_due()
        through = now if following is None else min(now, following - 1)
        self.progress.through_ms = max(self.progress.through_ms, through)
        self.progress.done(done)

    async def _deliver(self, entries: list[Entry]) -> tuple[list[Entry], list[Entry]]:
        """Store due entries in their real queues: those done (stored, or gone), and those that failed."""
        rows = await self._rows(sorted(offset for _, offset in entries))
        done: list[Entry] = []
        due: list[tuple[str, int, StandardMessage, Entry]] = []
        for entry in entries:
            row = rows.get(entry[1])
            try:
                if row is None:
                    raise ValueError(f"the commit log no longer holds parked offset {entry[1]}")
                topic, queue_id, message = due_message(row)
            except (ValueError, RocketMQError):  # nothing to deliver: skipped
                log.exception("timer message at offset %d cannot be delivered", entry[1])
                done.append(entry)
                continue
            due.append((topic, queue_id, message, entry))
        stored = await store_due(self._store, due)
        done += stored
        failed = set(entries) - set(done)
        return done, sorted(failed)

    async def _roll(self, now: int) -> bool:
        """Park again the messages that waited `roll_after_ms`, and move `roll_next` past what was
        acted on; whether anything changed."""
        progress = self.progress
        start = progress.roll_next
        while progress.roll_next < self._known:
            offsets, dues, _, stored_at = await self._entries(
                progress.roll_next, min(self._known, progress.roll_next + _ROLL_SCAN_ENTRIES)
            )
            if not len(offsets):
                break
            acted = progress.acted_many(offsets, dues)
            to_roll = ~acted & (stored_at + self._roll_after_ms <= now) & (dues > now)
            blocking = np.flatnonzero(~acted & ~to_roll)
            end = int(blocking[0]) if len(blocking) else len(offsets)
            if to_roll[:end].any():
                await self._park_again(dues[:end][to_roll[:end]].tolist(), offsets[:end][to_roll[:end]].tolist())
                still = np.flatnonzero(~progress.acted_many(offsets[:end], dues[:end]))
                end = int(still[0]) if len(still) else end
            progress.roll_next = int(offsets[0]) + end
            if end < len(offsets):
                break
        return progress.roll_next != start

    async def _park_again(self, dues: list[int], offsets: list[int]) -> None:
        rows = await self._rows(offsets)
        pairs = zip(dues, offsets, strict=True)
        again = [(TIMER_TOPIC, 0, rolled_message(rows[o]), (d, o)) for d, o in pairs if o in rows]
        stored = await store_due(self._store, again)
        self.progress.done(stored)
        if stored:
            log.info("%d timer messages parked again (waited %d s)", len(stored), self._roll_after_ms // 1000)

    async def _rows(self, offsets: list[int]) -> dict[int, dict[str, Any]]:
        """The stored messages (STORED_SCHEMA rows) at sorted `offsets` of the timer queue, by offset,
        read together (entries of nearby offsets in one read); those the commit log no longer holds
        are missing."""
        clusters: list[list[int]] = []
        for offset in offsets:
            if clusters and offset - clusters[-1][0] < _SCAN_ENTRIES:
                clusters[-1].append(offset)
            else:
                clusters.append([offset])
        picked = []
        for cluster in map(np.asarray, clusters):
            first = max(int(cluster[0]), self._store.min_offset(TIMER_TOPIC, 0))
            entries = await self._store.queue_entries(TIMER_TOPIC, 0, first, int(cluster[-1]) - first + 1)
            held = cluster[(cluster >= first) & (cluster < first + len(entries))]
            picked.append(entries[held - first])
        if not picked:
            return {}
        pieces = await self._store.stored_rows(np.concatenate(picked))
        return {row["queue_offset"]: row for batch in arrow_batches(pieces) for row in batch.to_pylist()}

    def _persist(self) -> None:
        self.progress.persist(self._store.commit_log.max_offset)
        self._persisted_at = time.monotonic()
