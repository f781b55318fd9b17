"""A numpy array that grows by appending, with amortised O(1) appends."""

from __future__ import annotations

from typing import Any

import numpy as np


class GrowableArray:
    """Appends in place; `view()` returns the filled part without copying."""

    def __init__(self, dtype: Any, capacity: int = 1024) -> None:
        self._data = np.empty(max(capacity, 16), dtype=dtype)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def view(self) -> np.ndarray:
        return self._data[: self._size]

    def append(self, values: np.ndarray) -> None:
        count = len(values)
        needed = self._size + count
        if needed > len(self._data):
            grown = np.empty(max(needed, 2 * len(self._data)), dtype=self._data.dtype)
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size : needed] = values
        self._size = needed

    def truncate(self, size: int) -> None:
        self._size = max(0, min(size, self._size))

    def drop_head(self, count: int) -> None:
        """Forget the first `count` elements (retention), keeping the rest in order."""
        count = max(0, min(count, self._size))
        if count:
            remaining = self._size - count
            self._data[:remaining] = self._data[count : self._size]
            self._size = remaining
