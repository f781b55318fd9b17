"""A bounded LRU cache of fixed-size blocks of on-disk entries (consume queues).

Blocks are keyed by their owner's serial number (unique for the life of the process, unlike
`id()`) and block number. A block only ever holds entries that are on disk and immutable; an owner
whose entries change in place (recovery truncating a queue) drops its blocks first.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np


class BlockCache:
    def __init__(self, limit_bytes: int) -> None:
        self._blocks: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self._bytes = 0
        self._limit = limit_bytes

    def get(self, owner: int, block: int) -> np.ndarray | None:
        found = self._blocks.get((owner, block))
        if found is not None:
            self._blocks.move_to_end((owner, block))
        return found

    def put(self, owner: int, block: int, entries: np.ndarray) -> None:
        key = (owner, block)
        previous = self._blocks.pop(key, None)
        if previous is not None:
            self._bytes -= previous.nbytes
        self._blocks[key] = entries
        self._bytes += entries.nbytes
        while self._bytes > self._limit and len(self._blocks) > 1:
            _, evicted = self._blocks.popitem(last=False)
            self._bytes -= evicted.nbytes

    def drop_owner(self, owner: int) -> None:
        for key in [k for k in self._blocks if k[0] == owner]:
            self._bytes -= self._blocks.pop(key).nbytes

    @property
    def size_bytes(self) -> int:
        return self._bytes
