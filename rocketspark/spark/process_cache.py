"""What a Spark Python worker process keeps while its queries use it: one client, producer or puller per key.

A worker runs many tasks, one after another or side by side on its threads, of one query or of
several (Spark reuses Python workers across queries); they share one object per setting (name
servers, group, credentials and so on) so that each task does not start a client of its own. Each
cache makes an object on first use, under its lock (a second task asking meanwhile waits for it,
rather than starting another), and makes it again when the one it holds is no longer `alive` (a
client stopped, or a puller or producer whose client stopped).

A cache given `idle_s` closes what no task has used for that long, as Spark's Kafka producer cache
expires idle producers (`spark.kafka.producer.cache.timeout`): the producers of a query that
finished do not stay registered for the life of the worker. An object is in use from `get` (a
moment) or for the whole `using` block (a task's sends), and is never closed while in use; idle
objects are looked for on every `get` and `using`, under the cache's lock, and closed there.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass
class _Entry(Generic[V]):
    value: V
    last_used: float
    users: int = 0


class ProcessCache(Generic[K, V]):
    def __init__(
        self,
        *,
        alive: Callable[[V], bool],
        close: Callable[[V], None] | None = None,
        idle_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`close` ends an object that has not been used for `idle_s` seconds (never, without both)."""
        self._items: dict[K, _Entry[V]] = {}
        self._lock = threading.Lock()
        self._alive = alive
        self._close = close
        self._idle_s = idle_s
        self._clock = clock

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The object kept for `key`, made with `make` when there is none or it stopped."""
        with self._lock:
            return self._entry(key, make).value

    @contextlib.contextmanager
    def using(self, key: K, make: Callable[[], V]) -> Iterator[V]:
        """:meth:`get`, the object kept from closing until the block ends."""
        with self._lock:
            entry = self._entry(key, make)
            entry.users += 1
        try:
            yield entry.value
        finally:
            with self._lock:
                entry.users -= 1
                entry.last_used = self._clock()

    def _entry(self, key: K, make: Callable[[], V]) -> _Entry[V]:
        now = self._clock()
        self._close_idle(now, key)
        found = self._items.get(key)
        if found is None or not self._alive(found.value):
            found = self._items[key] = _Entry(make(), now)
        found.last_used = now
        return found

    def _close_idle(self, now: float, wanted: K) -> None:
        """Close and forget the objects idle for `idle_s` (but the one about to be used, `wanted`)."""
        if self._close is None or self._idle_s is None:
            return
        for key, entry in list(self._items.items()):
            if key != wanted and not entry.users and now - entry.last_used >= self._idle_s:
                del self._items[key]
                self._close(entry.value)
