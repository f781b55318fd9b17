"""`ProcessQueue`: what one owned queue has pulled and not yet consumed, as Java's ProcessQueue.

Pulls append messages in increasing offset order, so insertion-ordered dicts keep the offsets
sorted: the first key is the smallest offset in flight, which is what the group may commit.
Only the event loop touches a process queue (pool threads read `dropped` alone).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rocketspark.message.message import MessageExt
from rocketspark.protocol.queue import MessageQueue

#: a broker lock the client has not renewed for this long is no longer trusted (Java: 30 s)
LOCK_MAX_LIVE_S = 30.0


@dataclass(frozen=True, slots=True)
class Backlog:
    """A queue's messages pulled but not consumed: their count, body bytes and offset span."""

    count: int
    size: int
    span: int


class ProcessQueue:
    def __init__(self, queue: MessageQueue) -> None:
        self.queue = queue
        self._waiting: dict[int, MessageExt] = {}  # offset -> message not handed to the listener (orderly) or not done
        self._consuming: dict[int, MessageExt] = {}  # orderly: taken by the listener, not committed yet
        self.size = 0  # body bytes of both
        self.max_offset = -1  # the highest offset ever put
        self.dropped = False  # no longer owned: stop pulling and consuming
        self.removed = False  # offset committed for good: late results must not touch the offset store
        self.locked = False  # orderly clustering: the broker lock is held
        self.last_lock_time = 0.0  # time.monotonic() of the last successful lock

    @property
    def count(self) -> int:
        return len(self._waiting) + len(self._consuming)

    @property
    def span(self) -> int:
        """Offsets between the first and the last message waiting (Java's getMaxSpan)."""
        if not self._waiting:
            return 0
        return next(reversed(self._waiting)) - next(iter(self._waiting))

    def backlog(self) -> Backlog:
        return Backlog(self.count, self.size, self.span)

    def lock_valid(self) -> bool:
        return self.locked and time.monotonic() - self.last_lock_time <= LOCK_MAX_LIVE_S

    def mark_locked(self, locked: bool) -> None:
        self.locked = locked
        if locked:
            self.last_lock_time = time.monotonic()

    def put(self, messages: list[MessageExt]) -> None:
        for message in messages:
            if message.queue_offset not in self._waiting and message.queue_offset not in self._consuming:
                self._waiting[message.queue_offset] = message
                self.size += len(message.body)
                self.max_offset = max(self.max_offset, message.queue_offset)

    def remove(self, messages: list[MessageExt]) -> int | None:
        """Concurrent mode: forget consumed `messages`; the offset to commit now (None: nothing was in flight)."""
        if not self._waiting:
            return None
        for message in messages:
            if self._waiting.pop(message.queue_offset, None) is not None:
                self.size -= len(message.body)
        return next(iter(self._waiting)) if self._waiting else self.max_offset + 1

    def take(self, count: int) -> list[MessageExt]:
        """Orderly mode: the next `count` messages, in offset order, now being consumed."""
        taken = []
        for offset in list(self._waiting)[:count]:
            message = self._consuming[offset] = self._waiting.pop(offset)
            taken.append(message)
        return taken

    def commit(self) -> int | None:
        """Orderly mode: the taken messages are consumed; the offset to commit (None: none was taken)."""
        if not self._consuming:
            return None
        offset = next(reversed(self._consuming)) + 1
        self.size -= sum(len(m.body) for m in self._consuming.values())
        self._consuming = {}
        return offset

    def give_back(self) -> None:
        """Orderly mode: the taken messages go back to the front, to be consumed again in order."""
        self._waiting = {**self._consuming, **self._waiting}
        self._consuming = {}
