"""Waiting for a condition in tests: always with a deadline."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    check: Callable[[], T | Awaitable[T]], *, timeout_s: float = 5.0, interval_s: float = 0.05, what: str = "condition"
) -> T:
    """Call `check` until it returns a truthy value (exceptions count as "not yet"); fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last_error: BaseException | None = None
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result  # type: ignore[return-value]
        except Exception as exc:
            last_error = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise AssertionError(f"{what} not reached within {timeout_s} s{detail}")
        await asyncio.sleep(interval_s)
