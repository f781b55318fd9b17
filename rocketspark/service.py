"""Owners of background work: every timer in the project runs inside a service that
`stop()` cancels and awaits, so nothing outlives the component that started it."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Callable

from rocketspark.aio import wait_until

log = logging.getLogger(__name__)


class PeriodicService:
    """Runs `action` (a function or coroutine function) every `interval_s` seconds, the first
    time after `initial_delay_s`.

    A failing run is logged and does not stop later runs.
    """

    def __init__(
        self,
        name: str,
        interval_s: float,
        action: Callable[[], object],
        *,
        initial_delay_s: float | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"{name}: interval must be positive, got {interval_s}")
        self.name = name
        self.interval_s = interval_s
        self.initial_delay_s = interval_s if initial_delay_s is None else initial_delay_s
        self._action = action
        self._task: asyncio.Task[None] | None = None
        self._triggered = False
        self._waiter: asyncio.Future[None] | None = None
        self.completed_runs = 0  # runs that returned, failed ones included

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if self.running:
            raise RuntimeError(f"service {self.name} is already running")
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    def trigger(self) -> None:
        """Run the action now instead of waiting for the rest of the interval."""
        self._triggered = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        delay = self.initial_delay_s
        while True:
            if not self._triggered:
                self._waiter = asyncio.get_running_loop().create_future()
                try:
                    await wait_until(self._waiter, delay)
                finally:
                    self._waiter = None
            self._triggered = False
            delay = self.interval_s
            try:
                result = self._action()
                if inspect.isawaitable(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("periodic task %s failed", self.name)
            self.completed_runs += 1
