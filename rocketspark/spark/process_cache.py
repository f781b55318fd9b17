"""What a Spark Python worker process keeps for its life: one client, producer or puller per key.

A worker runs many tasks, one after another or side by side on its threads; they share one object
per setting (name servers, group, credentials and so on) so that each task does not start a client
of its own. Each cache makes an object on first use, under its lock (a second task asking meanwhile
waits for it, rather than starting another), and makes it again when the one it holds is no longer
`alive` (a client stopped, or a puller or producer whose client stopped).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ProcessCache(Generic[K, V]):
    def __init__(self, *, alive: Callable[[V], bool]) -> None:
        self._items: dict[K, V] = {}
        self._lock = threading.Lock()
        self._alive = alive

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The object kept for `key`, made with `make` when there is none or it stopped."""
        with self._lock:
            found = self._items.get(key)
            if found is None or not self._alive(found):
                found = self._items[key] = make()
            return found
