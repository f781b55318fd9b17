"""Long polling: pulls that find nothing wait here until a matching message arrives or time runs out.

Held pulls are keyed by `topic@queueId`, as in RocketMQ's PullRequestHoldService. The store calls
:meth:`notify` for every batch it makes visible; a held pull wakes when the queue grew past its
offset with at least one message its tag filter accepts. At most `max_held` pulls are held; a pull
beyond them is answered SYSTEM_BUSY (RocketMQ refuses pulls that overflow its pull thread pool so).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import numpy as np

from rocketspark.aio import wait_until
from rocketspark.errors import RocketMQError
from rocketspark.protocol.codes import ResponseCode


@dataclass(eq=False, slots=True)
class HeldPull:
    offset: int
    tag_codes: np.ndarray | None  # None: every message matches
    woken: asyncio.Future[None]


class PullRequestHoldService:
    def __init__(self, max_held: int) -> None:
        self._held: dict[tuple[str, int], list[HeldPull]] = {}
        self._max_held = max_held
        self.held_count = 0

    async def hold(
        self, topic: str, queue_id: int, offset: int, tag_codes: frozenset[int] | None, timeout_s: float
    ) -> bool:
        """Wait up to `timeout_s`; True when woken by a matching arrival, False at the deadline.

        Raises RocketMQError(SYSTEM_BUSY) when `max_held` pulls are held already.
        """
        if self.held_count >= self._max_held:
            raise RocketMQError(
                f"[OVERLOAD]system busy, start flow control for a while: {self.held_count} pulls are held "
                "(maxHeldPullRequests)",
                code=ResponseCode.SYSTEM_BUSY,
            )
        codes = np.fromiter(tag_codes, np.int64) if tag_codes is not None else None
        held = HeldPull(offset, codes, asyncio.get_running_loop().create_future())
        key = (topic, queue_id)
        self._held.setdefault(key, []).append(held)
        self.held_count += 1
        try:
            return await wait_until(held.woken, timeout_s)
        finally:
            self.held_count -= 1
            waiting = self._held.get(key)
            if waiting is not None:
                with contextlib.suppress(ValueError):
                    waiting.remove(held)
                if not waiting:
                    del self._held[key]

    def notify(self, topic: str, queue_id: int, max_offset: int, tag_codes: np.ndarray) -> None:
        for held in self._held.get((topic, queue_id), ()):
            if held.woken.done() or max_offset <= held.offset:
                continue
            if held.tag_codes is None or np.isin(tag_codes, held.tag_codes).any():
                held.woken.set_result(None)
