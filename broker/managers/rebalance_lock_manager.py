"""Queue locks of orderly consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ), expiring after 60 s."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rocketspark.protocol.queue import MessageQueue

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class LockEntry:
    client_id: str
    last_update_ms: int


class RebalanceLockManager:
    def __init__(self, max_live_ms: int, clock: Callable[[], int] = _now_ms) -> None:
        self.max_live_ms = max_live_ms
        self.clock = clock
        self.table: dict[str, dict[MessageQueue, LockEntry]] = {}

    def try_lock_batch(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> list[MessageQueue]:
        """Lock every queue that is free, expired or already held by `client_id`; return those."""
        now = self.clock()
        locks = self.table.setdefault(group, {})
        locked = []
        for queue in queues:
            entry = locks.get(queue)
            if entry is None or entry.client_id == client_id or now - entry.last_update_ms > self.max_live_ms:
                if entry is not None and entry.client_id != client_id:
                    log.info("lock of %s in group %s expired; %s takes it", queue, group, client_id)
                locks[queue] = LockEntry(client_id, now)
                locked.append(queue)
        return locked

    def unlock_batch(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> None:
        locks = self.table.get(group, {})
        for queue in queues:
            entry = locks.get(queue)
            if entry is not None and entry.client_id == client_id:
                del locks[queue]
