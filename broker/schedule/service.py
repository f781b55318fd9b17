"""The schedule service: stores delayed messages again in their real queues once they are due.

Queue n - 1 of SCHEDULE_TOPIC_XXXX holds the messages of delay level n in the order they were
stored, so they fall due in that order too: every tick (100 ms, Java's DELAY_FOR_A_WHILE) each level
delivers its messages stored at least that level's delay ago, from where it stopped (broker/schedule/delay_levels.py
says what a delivered message looks like). Where each level stopped is written to
`config/delayOffset.json` after every tick that delivered something, at least every second while the
commit log grows, and at shutdown (broker/schedule/progress.py). Each delayed message is delivered
once: a run refused while later ones were stored is delivered alone on a later tick, and after a
crash the deliveries stored since the last write are found in the commit log and not repeated.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from broker.schedule.delay_levels import DelayLevels, due_message
from broker.schedule.delivery import store_due
from broker.schedule.progress import DeliveryProgress
from broker.store.message_store import MessageStore
from broker.store.results import GetStatus
from broker.store.writer.append_requests import StandardMessage
from rocketspark.errors import RocketMQError
from rocketspark.fileutil import AtomicFileWriter
from rocketspark.message.validation import SCHEDULE_TOPIC
from rocketspark.service import PeriodicService

log = logging.getLogger(__name__)

TICK_S = 0.1
#: while nothing is delivered, how often the progress is written again as the commit log grows
#: (a crash then reads back at most this much of the commit log at startup)
_IDLE_PERSIST_S = 1.0
#: messages of one level delivered in one step (a step's reads and writes are a few store calls)
_STEP_MESSAGES = 1024
_STEP_BYTES = 16 * 1024 * 1024


class ScheduleMessageService:
    def __init__(self, store: MessageStore, levels: DelayLevels, writer: AtomicFileWriter) -> None:
        self._store = store
        self._levels = levels
        self.progress = DeliveryProgress(writer)
        self._writer = writer
        self._level_count = levels.max_level
        self._persisted_at = 0.0
        self._service = PeriodicService("deliver-delayed-messages", TICK_S, self.deliver_due)

    def load(self) -> None:
        """Read the delivery progress and count the deliveries stored after it was written (after
        the store recovered, before the broker serves). Levels beyond the configured ones
        (messageDelayLevel shortened since they were stored) are delivered after the last level's delay."""
        parked = [queue_id + 1 for topic, queue_id in self._store.queues if topic == SCHEDULE_TOPIC]
        self._level_count = max([self._levels.max_level, *parked])
        self.progress.load()
        self.progress.recover(self._store.commit_log)
        self._persist()

    def start(self) -> None:
        self._service.start()

    async def stop(self) -> None:
        await self._service.stop()
        self._persist()
        await self._writer.flush()

    async def deliver_due(self) -> None:
        """Deliver every message due now; a level whose delivery fails tries again next tick."""
        now_ms = int(time.time() * 1000)
        delivered = 0
        for level in range(1, self._level_count + 1):
            delivered += await self._deliver_level(level, now_ms - self._levels.delay_ms(level))
        moved = self.progress.watermark != self._store.commit_log.max_offset
        if delivered or (moved and time.monotonic() - self._persisted_at >= _IDLE_PERSIST_S):
            self._persist()

    async def _deliver_level(self, level: int, stored_by_ms: int) -> int:
        """Deliver the level's messages stored by `stored_by_ms`; how many were delivered."""
        progress = self.progress
        delivered = 0
        while True:
            start = progress.offset(level)
            offset, due = await self._store.stored_by(SCHEDULE_TOPIC, level - 1, start, stored_by_ms, _STEP_MESSAGES)
            if offset != start:
                log.warning("delay level %d: messages below offset %d were deleted before they were due", level, offset)
                progress.skip_to(level, offset)
            if not due:
                return delivered
            result = await self._store.get_messages(
                SCHEDULE_TOPIC, level - 1, offset, max_messages=due, max_bytes=_STEP_BYTES
            )
            if result.status is GetStatus.FOUND:
                rows = [row for batch in result.batches() for row in batch.to_pylist()]
                undelivered = [row for row in rows if not progress.is_delivered(level, row["queue_offset"])]
                done = await self._put(level, undelivered)
                progress.delivered(level, done)
                delivered += len(done)
                if len(done) < len(undelivered):
                    return delivered
                removed = set(range(offset, result.next_begin_offset)) - {row["queue_offset"] for row in rows}
                progress.delivered(level, removed)  # deleted from the commit log meanwhile
            elif result.status is GetStatus.MESSAGE_WAS_REMOVING:  # the commit log no longer holds them
                progress.skip_to(level, max(result.next_begin_offset, offset + 1))
            else:
                log.warning("delay level %d: reading offset %d found %s; trying again", level, offset, result.status)
                return delivered

    async def _put(self, level: int, rows: list[dict[str, Any]]) -> list[int]:
        """Store `rows` in their real queues: the offsets of the rows stored, and of those that cannot
        be delivered (they are skipped)."""
        skipped: list[int] = []
        due: list[tuple[str, int, StandardMessage, int]] = []
        for row in rows:
            try:
                topic, queue_id, message = due_message(row, level)
            except (ValueError, RocketMQError):  # nothing to deliver: skipped
                log.exception("scheduled message at offset %d cannot be delivered", row["queue_offset"])
                skipped.append(row["queue_offset"])
                continue
            due.append((topic, queue_id, message, row["queue_offset"]))
        return skipped + await store_due(self._store, due)

    def _persist(self) -> None:
        self.progress.persist(self._store.commit_log.max_offset)
        self._persisted_at = time.monotonic()
