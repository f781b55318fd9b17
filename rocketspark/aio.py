"""asyncio helpers.

`asyncio.wait_for` on Python 3.11 can lose the caller's cancellation when the awaited future
completes at the same moment (fixed in 3.12); a service being stopped then carries on for another
interval. :func:`wait_until` never loses a cancellation and never cancels what it waits for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any


def _finish(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_result(None)


async def wait_until(future: asyncio.Future[Any], timeout_s: float) -> bool:
    """Wait for `future` at most `timeout_s` seconds; True when it completed in time."""
    if future.done():
        return True
    loop = asyncio.get_running_loop()
    deadline = loop.create_future()
    timer = loop.call_later(max(timeout_s, 0), _finish, deadline)
    try:
        await asyncio.wait((future, deadline), return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
    return future.done()


async def finish_or_cancel(tasks: Collection[asyncio.Task[Any]], timeout_s: float) -> int:
    """Let `tasks` finish for at most `timeout_s` seconds, cancel those still running, and wait for
    them to end; returns how many had to be cancelled."""
    if not tasks:
        return 0
    _, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return len(pending)
