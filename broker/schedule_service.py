"""The schedule service: stores delayed messages again in their real queues once they are due.

Queue n - 1 of SCHEDULE_TOPIC_XXXX holds the messages of delay level n in the order they were
stored, so they fall due in that order too: every tick (100 ms, Java's DELAY_FOR_A_WHILE) each level
delivers its messages stored at least that level's delay ago, from where it stopped (broker/schedule.py
says what a delivered message looks like). Where each level stopped is kept in
`config/delayOffset.json`, Java's `{"offsetTable": {level: offset}}`, written after every tick that
delivered something and at shutdown: after a crash, the messages delivered since the last write are
delivered again (at least once, as in Java; a user topic's duplicate window drops such copies).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import orjson

from broker.schedule import DelayLevels, due_message
from broker.store.append_requests import StandardMessage
from broker.store.message_store import MessageStore
from broker.store.results import GetStatus, PutResult
from rocketspark.errors import RocketMQError
from rocketspark.fileutil import AtomicFileWriter
from rocketspark.message.validation import SCHEDULE_TOPIC
from rocketspark.remoting.body.jsonbody import loads
from rocketspark.service import PeriodicService

log = logging.getLogger(__name__)

TICK_S = 0.1
#: messages of one level delivered in one step (a step's reads and writes are a few store calls)
_STEP_MESSAGES = 1024
_STEP_BYTES = 16 * 1024 * 1024


@dataclass(slots=True)
class _Run:
    """Consecutive due messages for one queue, and the SCHEDULE_TOPIC_XXXX offset after them."""

    topic: str
    queue_id: int
    messages: list[StandardMessage]
    end: int


class ScheduleMessageService:
    def __init__(self, store: MessageStore, levels: DelayLevels, writer: AtomicFileWriter) -> None:
        self._store = store
        self._levels = levels
        self._writer = writer
        self.offsets: dict[int, int] = {}  # delay level -> next SCHEDULE_TOPIC_XXXX offset to deliver
        self._level_count = levels.max_level
        self._service = PeriodicService("deliver-delayed-messages", TICK_S, self.deliver_due)

    def load(self) -> None:
        """Read the delivery progress (after the store recovered). Levels beyond the configured ones
        (messageDelayLevel shortened since they were stored) are delivered after the last level's delay."""
        parked = [queue_id + 1 for topic, queue_id in self._store.queues if topic == SCHEDULE_TOPIC]
        self._level_count = max([self._levels.max_level, *parked])
        path = self._writer.path
        if path.exists():
            table = loads(path.read_bytes()).get("offsetTable") or {}
            self.offsets = {int(level): int(offset) for level, offset in table.items()}
            log.info("delivery progress of %d delay level(s) loaded from %s", len(self.offsets), path)

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
        if delivered:
            self._persist()

    async def _deliver_level(self, level: int, stored_by_ms: int) -> int:
        """Deliver the level's messages stored by `stored_by_ms`; how many were delivered."""
        delivered = 0
        while True:
            offset, due = await self._store.stored_by(
                SCHEDULE_TOPIC, level - 1, self.offsets.get(level, 0), stored_by_ms, _STEP_MESSAGES
            )
            if offset != self.offsets.get(level, 0):
                log.warning("delay level %d: messages below offset %d were deleted before they were due", level, offset)
                self.offsets[level] = offset
            if not due:
                return delivered
            result = await self._store.get_messages(
                SCHEDULE_TOPIC, level - 1, offset, max_messages=due, max_bytes=_STEP_BYTES
            )
            if result.status is GetStatus.FOUND:
                end = await self._put([row for batch in result.batches() for row in batch.to_pylist()])
                if end is None:
                    return delivered
            elif result.status is GetStatus.MESSAGE_WAS_REMOVING:  # the commit log no longer holds them
                end = max(result.next_begin_offset, offset + 1)
            else:
                log.warning("delay level %d: reading offset %d found %s; trying again", level, offset, result.status)
                return delivered
            delivered += end - offset
            self.offsets[level] = end

    async def _put(self, rows: list[dict[str, Any]]) -> int | None:
        """Store `rows` in their real queues, one write per run of rows for one queue: the offset after
        the last row of the runs written before the first failure (None: the first run failed)."""
        runs: list[_Run] = []
        for row in rows:
            try:
                topic, queue_id, message = due_message(row)
            except (ValueError, RocketMQError):  # nothing to deliver: skipped
                log.exception("scheduled message at offset %d cannot be delivered", row["queue_offset"])
                runs.append(_Run("", -1, [], row["queue_offset"] + 1))
                continue
            if runs and runs[-1].messages and (runs[-1].topic, runs[-1].queue_id) == (topic, queue_id):
                runs[-1].messages.append(message)
                runs[-1].end = row["queue_offset"] + 1
            else:
                runs.append(_Run(topic, queue_id, [message], row["queue_offset"] + 1))
        writes: list[asyncio.Future[PutResult] | None] = []
        for run in runs:
            try:
                writes.append(self._store.put_messages(run.topic, run.queue_id, run.messages) if run.messages else None)
            except RocketMQError as exc:  # the store is busy: the rest waits for the next tick
                log.warning("delivering delayed messages to %s failed: %s; trying again", run.topic, exc)
                break
        end = None
        failed = False
        for run, write in zip(runs, writes, strict=False):
            if write is not None:
                try:
                    await write
                except RocketMQError as exc:  # the runs after it are delivered again next tick
                    log.warning("delivering delayed messages to %s failed: %s; trying again", run.topic, exc)
                    failed = True
            if not failed:
                end = run.end
        return end

    def _persist(self) -> None:
        table = {str(level): offset for level, offset in sorted(self.offsets.items())}
        self._writer.write(orjson.dumps({"offsetTable": table}, option=orjson.OPT_INDENT_2))
