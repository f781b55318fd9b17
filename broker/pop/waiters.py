"""Long polling of receives: a receive that found nothing waits here for a reason to look again.

A waiting receive wakes when a message its tag filter may accept arrives in its topic (the store's
arrival listener, as held 4.x pulls wake: broker/pull_request_hold_service.py), when its group's
window of the topic changes so that something may be deliverable (a FIFO message group freed, an
invisible time shortened), or at a time it names (the next invisible time that passes). At most
`max_waiting` receives wait; one more is refused TOO_MANY_REQUESTS, as Apache answers "polling full".
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import numpy as np

from broker.pop.errors import PopError, Refusal
from rocketspark.aio import wait_until


@dataclass(eq=False, slots=True)
class Waiter:
    group: str
    codes: np.ndarray | None  # None: every message matches
    woken: asyncio.Future[None]


class PopWaiters:
    def __init__(self, max_waiting: int) -> None:
        self._waiting: dict[str, list[Waiter]] = {}  # by topic
        self._max_waiting = max_waiting
        self.count = 0

    async def wait(self, group: str, topic: str, codes: frozenset[int] | None, timeout_s: float) -> None:
        """Return when woken, or after `timeout_s`."""
        if self.count >= self._max_waiting:
            raise PopError(
                Refusal.TOO_MANY_REQUESTS,
                f"polling full: {self.count} receives wait already (maxHeldPullRequests); try again later",
            )
        tag_codes = np.fromiter(codes, np.int64) if codes is not None else None
        waiter = Waiter(group, tag_codes, asyncio.get_running_loop().create_future())
        self._waiting.setdefault(topic, []).append(waiter)
        self.count += 1
        try:
            await wait_until(waiter.woken, timeout_s)
        finally:
            self.count -= 1
            waiting = self._waiting.get(topic)
            if waiting is not None:
                with contextlib.suppress(ValueError):
                    waiting.remove(waiter)
                if not waiting:
                    del self._waiting[topic]

    def arrived(self, topic: str, queue_id: int, max_offset: int, tag_codes: np.ndarray) -> None:
        """The store's arrival listener: messages with `tag_codes` were stored in the topic."""
        for waiter in self._waiting.get(topic, ()):
            if not waiter.woken.done() and (waiter.codes is None or np.isin(tag_codes, waiter.codes).any()):
                waiter.woken.set_result(None)

    def changed(self, group: str, topic: str) -> None:
        """The group's window of the topic changed: its waiting receives look again."""
        for waiter in self._waiting.get(topic, ()):
            if waiter.group == group and not waiter.woken.done():
                waiter.woken.set_result(None)
