"""The send retry policy: which answers are retried, where, and after what pause (SYSTEM_BUSY backs off)."""

from __future__ import annotations

import time

import pytest

from rocketspark.client.send_retry import BUSY_BACKOFF_S, SendError, send_with_retries
from rocketspark.errors import ResponseError
from rocketspark.message.queue import MessageQueue
from rocketspark.remoting.codes import ResponseCode
from rocketspark.remoting.errors import RemotingTimeoutError

QUEUES = [MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-b", 0)]


def answer(code: ResponseCode) -> ResponseError:
    """The error a broker's answer becomes (as api.common.call raises it)."""
    return ResponseError.for_code(code, "[REJECTREQUEST]system busy, start flow control for a while", "send to T")


class Broker:
    """Answers the given codes in turn (SUCCESS ends), recording which queue each attempt went to."""

    def __init__(self, *codes: ResponseCode) -> None:
        self.codes = list(codes)
        self.tried: list[tuple[MessageQueue, float]] = []

    async def attempt(self, queue: MessageQueue, remaining_s: float) -> str:
        self.tried.append((queue, time.monotonic()))
        code = self.codes.pop(0)
        if code != ResponseCode.SUCCESS:
            raise answer(code)
        return f"stored on {queue.broker_name}"


async def send(broker: Broker, *, fixed: bool, timeout_s: float = 3.0, retries: int = 2) -> str:
    async def choose(avoid: str | None) -> MessageQueue:
        if fixed:
            return QUEUES[0]
        return next(q for q in QUEUES if q.broker_name != avoid)

    async def refresh() -> None:
        return None

    return await send_with_retries(
        "T", choose, broker.attempt, retries=retries, timeout_s=timeout_s, fixed_queue=fixed, refresh_route=refresh
    )


async def test_system_busy_is_retried_on_a_fixed_queue_after_growing_pauses() -> None:
    broker = Broker(ResponseCode.SYSTEM_BUSY, ResponseCode.SYSTEM_BUSY, ResponseCode.SUCCESS)
    assert await send(broker, fixed=True) == "stored on broker-a"
    (first, t0), (second, t1), (third, t2) = broker.tried
    assert first == second == third == QUEUES[0]  # nothing was stored, so the queue (and order) stays
    assert BUSY_BACKOFF_S / 2 <= t1 - t0 < BUSY_BACKOFF_S + 0.1  # pauses carry up to 50 % jitter
    assert BUSY_BACKOFF_S <= t2 - t1 < 2 * BUSY_BACKOFF_S + 0.1


async def test_system_busy_moves_to_another_broker_after_a_pause() -> None:
    broker = Broker(ResponseCode.SYSTEM_BUSY, ResponseCode.SUCCESS)
    assert await send(broker, fixed=False) == "stored on broker-b"
    (_, t0), (_, t1) = broker.tried
    assert t1 - t0 >= BUSY_BACKOFF_S / 2


async def test_other_retriable_answers_retry_at_once_and_never_on_a_fixed_queue() -> None:
    broker = Broker(ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SUCCESS)
    assert await send(broker, fixed=False) == "stored on broker-b"
    (_, t0), (_, t1) = broker.tried
    assert t1 - t0 < BUSY_BACKOFF_S / 4
    with pytest.raises(SendError, match=r"failed after 1 attempt\(s\): broker-a: .*SERVICE_NOT_AVAILABLE"):
        await send(Broker(ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SUCCESS), fixed=True)
    with pytest.raises(ResponseError, match="MESSAGE_ILLEGAL"):
        await send(Broker(ResponseCode.MESSAGE_ILLEGAL, ResponseCode.SUCCESS), fixed=False)


async def test_backoff_never_passes_the_send_deadline() -> None:
    broker = Broker(*[ResponseCode.SYSTEM_BUSY] * 10)
    started = time.monotonic()
    with pytest.raises((SendError, RemotingTimeoutError), match="SYSTEM_BUSY"):
        await send(broker, fixed=True, timeout_s=0.25, retries=9)
    assert time.monotonic() - started < 0.25 + 0.15
