"""The client's one retry policy: how long to wait between attempts, and how a question to a broker
is asked again.

Every pause is an exponential backoff with jitter (`Backoff`): it starts at `first_s`, doubles with
each failure up to `max_s`, and is shortened at random by up to half so that requests refused
together do not come back together. Sends use it after SYSTEM_BUSY and while they hold a fixed queue
(`rocketspark.client.producer.send_retry`); questions to a broker (offsets, store times, body sizes) use it
through `ask_broker`, which also refreshes the topic's route between attempts so that a broker back
on another address is found, and gives up when the failure cannot pass or the time is up.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from rocketspark.client.instance import ClientInstance
from rocketspark.errors import RemotingTimeoutError, RocketMQError
from rocketspark.protocol.queue import MessageQueue

log = logging.getLogger(__name__)

T = TypeVar("T")

#: how long, and how many times, a question to a broker is asked while it fails in a way that can pass
ASK_WINDOW_S = 5.0
ASK_ATTEMPTS = 4


@dataclass
class Backoff:
    """The pauses between attempts: `first_s`, doubling up to `max_s`, each less up to half at random."""

    first_s: float = 0.1
    max_s: float = 1.0
    _next_s: float = 0.0

    def pause_s(self) -> float:
        """The next pause (and the one after it doubles)."""
        base = self._next_s or self.first_s
        self._next_s = min(2 * base, self.max_s)
        return base * (0.5 + random.random() / 2)


async def ask_broker(
    instance: ClientInstance,
    queue: MessageQueue,
    ask: Callable[[str], Awaitable[T]],
    *,
    deadline: float | None = None,
) -> T:
    """`ask(address)` of the broker of `queue`, asked again after a backoff (from 0.2 s) while it
    fails in a way that can pass (a broker restarting, a refused connection, a timeout): at most
    `ASK_ATTEMPTS` times within `ASK_WINDOW_S` (a broker that does not answer at all makes each
    attempt wait for the request timeout, so it gets fewer); with a `deadline` (time.monotonic()),
    no attempt runs past it."""
    backoff = Backoff(first_s=0.2, max_s=1.0)
    give_up = time.monotonic() + ASK_WINDOW_S
    if deadline is not None:
        give_up = min(give_up, deadline)
    for attempt in range(1, ASK_ATTEMPTS + 1):
        try:
            address = await instance.broker_address(queue.broker_name, queue.topic)
            return await _before(ask(address), deadline, queue)
        except RocketMQError as exc:
            pause = backoff.pause_s()
            if not exc.retriable or attempt == ASK_ATTEMPTS or time.monotonic() + pause >= give_up:
                raise
            log.info("asking broker %s about %s failed (%s); again in %.1f s", queue.broker_name, queue, exc, pause)
        await asyncio.sleep(pause)
        try:
            await instance.fetch_route(queue.topic)  # the broker may be back on another address
        except RocketMQError as exc:
            log.info("refreshing the route of %s failed: %s", queue.topic, exc)
    raise AssertionError("unreachable: the last attempt returns or raises")


async def _before(question: Awaitable[T], deadline: float | None, queue: MessageQueue) -> T:
    """The question's answer; with a `deadline`, given up on at it."""
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        return await asyncio.wait_for(question, left)
    except TimeoutError:
        raise RemotingTimeoutError(f"broker {queue.broker_name} did not answer for {queue} in time") from None
