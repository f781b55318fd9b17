"""The retry policy of every send: which failures are tried again, where, and after what pause.

As Java's DefaultMQProducer: a send that failed with a connection error or one of the answers in
`RETRY_CODES` is tried again on another broker, up to `retry_times_when_send_failed` times, within one
deadline shared by every attempt; a send to a fixed queue (explicit, or by sharding key) is not. A
refusal of the broker's access control (AccessDeniedError) is raised at once; any other NO_PERMISSION
(a topic whose write permission was wiped on that broker) is tried on another broker, as Java does.
`SYSTEM_BUSY` is different: the broker refused without storing anything because it cannot keep up,
so the send is tried again after the client's backoff (`rocketspark.client.retry`: exponential with
jitter, as RocketMQ's clients back off when a broker asks for fewer requests), until the send's
deadline rather than a number of times (a busy answer is a request to wait, not a failure), on
another broker when there is one, on the same queue when the queue is fixed (order is kept: nothing
was stored). A producer that holds its fixed queues (`hold_queue`, the Spark sink's) treats every
retriable failure of a fixed-queue send so: tried again on the same queue, after the same backoff,
until the deadline, refreshing the route after a connection failure so that a broker back on a new
address is found.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from rocketspark.client.retry import Backoff
from rocketspark.errors import (
    AccessDeniedError,
    BrokerNotAvailableError,
    RemotingError,
    RemotingTimeoutError,
    ResponseError,
    RocketMQError,
)
from rocketspark.protocol.codes import ResponseCode
from rocketspark.protocol.queue import MessageQueue

T = TypeVar("T")

#: answers after which Java's producer tries another broker
RETRY_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.NO_PERMISSION,
    }
)
#: the first pause after SYSTEM_BUSY (less up to half, at random); it doubles with each busy answer,
#: up to BUSY_BACKOFF_MAX_S
BUSY_BACKOFF_S = 0.1
BUSY_BACKOFF_MAX_S = 1.0


class SendError(RocketMQError):
    """Every attempt of a send failed; the message names the brokers tried and why."""

    retriable = True


@dataclass(frozen=True, slots=True)
class Limits:
    """A send's timeout and retries; None: the producer's (`send_timeout_ms`, `retry_times_when_send_failed`)."""

    timeout_ms: int | None = None
    retries: int | None = None


NO_LIMITS = Limits()


async def send_with_retries(
    topic: str,
    choose: Callable[[str | None], Awaitable[MessageQueue]],
    attempt: Callable[[MessageQueue, float], Awaitable[T]],
    *,
    retries: int,
    timeout_s: float,
    fixed_queue: bool,
    refresh_route: Callable[[], Awaitable[object]],
    hold_queue: bool = False,
) -> T:
    """`attempt(queue, seconds left)` on `choose(broker to avoid)`'s queue until one succeeds.

    Raises the first answer that retrying cannot help, SendError when every attempt failed, and
    RemotingTimeoutError when the deadline passed first.
    """
    deadline = time.monotonic() + timeout_s
    failures: list[str] = []
    avoid: str | None = None
    backoff = Backoff(BUSY_BACKOFF_S, BUSY_BACKOFF_MAX_S)
    retries_left = retries
    holding = hold_queue and fixed_queue
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RemotingTimeoutError(_failed(topic, [*failures, "no time left"]))
        target = await choose(avoid)
        try:
            return await attempt(target, remaining)
        except (RemotingError, ResponseError, BrokerNotAvailableError) as exc:
            code = exc.code if isinstance(exc, ResponseError) else None
            if (
                (code is not None and code not in RETRY_CODES)
                or (isinstance(exc, BrokerNotAvailableError) and not holding)
                or isinstance(exc, AccessDeniedError)  # the same credentials would be refused again
            ):
                raise
            failures.append(f"{target.broker_name}: {exc}")
            if holding and not isinstance(exc, ResponseError):  # the broker may be back on a new address
                await _refresh_quietly(refresh_route)
            if code == ResponseCode.SYSTEM_BUSY or holding:  # back off and try again until the deadline
                avoid = None if fixed_queue else target.broker_name
                await asyncio.sleep(min(backoff.pause_s(), max(0.0, deadline - time.monotonic())))
                continue
            if fixed_queue or retries_left == 0:
                break
            retries_left -= 1
            avoid = target.broker_name
            if code == ResponseCode.TOPIC_NOT_EXIST:
                await refresh_route()
    raise SendError(_failed(topic, failures))


async def _refresh_quietly(refresh_route: Callable[[], Awaitable[object]]) -> None:
    with contextlib.suppress(RocketMQError):  # the name servers may be away too: the next attempt tells
        await refresh_route()


def _failed(topic: str, failures: list[str]) -> str:
    return f"send to topic {topic} failed after {len(failures)} attempt(s): {'; '.join(failures)}"
