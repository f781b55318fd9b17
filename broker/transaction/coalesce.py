"""`Coalescer`: requests made while the event loop runs one step, served by one call per key.

Producers keep many END_TRANSACTIONs in flight (the Spark sink one per task attempt and queue), and
the broker reads the frames of all that arrived at once before it runs any: each END's store read,
commit and end record would be a store request of its own. Submitted through a coalescer, those of
one step become one read of every half message, one commit request per real queue and one request
of every end record (broker/transaction/ends.py). A request waits for nothing but the end of the
loop step it was made in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")


class Coalescer(Generic[K, T, R]):
    """`submit(key, item)` -> the item's result of `serve(key, items)` (one result per item, in
    order), which runs once per key for the items submitted in one loop step; its failure is every
    item's."""

    def __init__(self, serve: Callable[[K, list[T]], Awaitable[list[R]]]) -> None:
        self._serve = serve
        self._pending: dict[K, list[tuple[T, asyncio.Future[R]]]] = {}
        self._serving: set[asyncio.Task[None]] = set()

    def submit(self, key: K, item: T) -> asyncio.Future[R]:
        loop = asyncio.get_running_loop()
        if not self._pending:
            loop.call_soon(self._flush)
        future: asyncio.Future[R] = loop.create_future()
        self._pending.setdefault(key, []).append((item, future))
        return future

    def _flush(self) -> None:
        pending, self._pending = self._pending, {}
        for key, submitted in pending.items():
            task = asyncio.ensure_future(self._run(key, submitted))
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)

    async def _run(self, key: K, submitted: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self._serve(key, [item for item, _ in submitted])
        except Exception as exc:  # every item fails with it
            for _, future in submitted:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException:  # cancelled (the broker stops): so are the items
            for _, future in submitted:
                future.cancel()
            raise
        for (_, future), result in zip(submitted, results, strict=True):
            if not future.done():
                future.set_result(result)
