"""Running a server process: start, print the boot line, serve until SIGTERM/SIGINT, stop cleanly.

The boot line names the address (`... boot success. listening on host:port`), as Apache RocketMQ's
servers print theirs; supervisors and tests wait for it (see :mod:`rocketspark.processes`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from rocketspark.errors import ConfigError

log = logging.getLogger(__name__)


async def serve_until_signalled(start: Callable[[], Awaitable[list[str]]], stop: Callable[[], Awaitable[None]]) -> None:
    """`start()` returns the boot lines to print; `stop()` runs on SIGTERM/SIGINT (and on failure)."""
    try:
        boot_lines = await start()
        finished = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, finished.set)
        for line in boot_lines:
            print(line, flush=True)
        await finished.wait()
        log.info("shutdown requested")
    finally:
        await stop()


def run_event_loop(coroutine: Coroutine[Any, Any, None]) -> None:
    """`asyncio.run`, on uvloop's faster event loop when it is installed."""
    try:
        import uvloop  # noqa: PLC0415 - optional
    except ImportError:
        asyncio.run(coroutine)
    else:
        uvloop.run(coroutine)


def run_process(main: Callable[[], Coroutine[Any, Any, None]], what: str) -> int:
    """Exit code of a server process: 0 after a clean stop, 1 when it could not start."""
    try:
        run_event_loop(main())
    except (OSError, ConfigError) as exc:
        log.error("%s failed to start: %s", what, exc)  # noqa: TRY400 - the reason is the whole story
        return 1
    return 0
