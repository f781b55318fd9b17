"""Background services stop promptly, whatever they are doing."""

from __future__ import annotations

import asyncio

from rocketspark.aio import wait_until
from rocketspark.service import PeriodicService
from tests.waiting import eventually


async def test_stop_right_after_a_trigger_does_not_wait_for_the_next_interval() -> None:
    for _ in range(50):
        service = PeriodicService("test", 60.0, lambda: None, initial_delay_s=60.0)
        service.start()
        await asyncio.sleep(0)
        service.trigger()  # wakes the wait while stop() cancels it: the cancellation must not be lost
        await asyncio.wait_for(service.stop(), 5)  # a lost cancellation would wait out the 60 s interval
        assert not service.running


async def test_trigger_runs_the_action_at_once_and_failures_do_not_stop_the_service() -> None:
    calls: list[int] = []

    def action() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first run fails")

    service = PeriodicService("test", 60.0, action, initial_delay_s=60.0)
    service.start()
    try:
        service.trigger()
        await eventually(lambda: len(calls) == 1, what="the first run")  # long before the 60 s interval
        service.trigger()
        await eventually(lambda: len(calls) == 2, what="a run after the failing one")
    finally:
        await service.stop()


async def test_wait_until_reports_timeout_without_cancelling() -> None:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    assert await wait_until(future, 0.05) is False
    assert not future.cancelled()
    future.set_result(None)
    assert await wait_until(future, 0.05) is True
