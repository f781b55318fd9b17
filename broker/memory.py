"""Make memory the broker frees go back to the operating system, so its size follows its caches.

Without this the resident size grows with the data the broker has moved, not with what it holds: a
store in one process that took 1M keyed messages in Arrow sends (duplicate window on, 64 MiB batch
cache) was 364 MiB resident while Arrow held 54 MiB and tracemalloc saw about 70 MiB of numpy and
Python objects. Two allocators kept freed memory:

- Arrow's default pool (mimalloc) keeps freed pages for reuse: Arrow allocates from the C library's
  allocator instead, so one allocator holds everything freed;
- glibc keeps freed blocks in its heap (its mmap threshold rises, up to 32 MiB, each time a large
  block is freed): `trim_heap` gives the free pages back, every 10 s from the broker's services.
  Every second was measured too: pages given back are faulted in again by the next large answer,
  which cost Arrow consume about 15% (1.40M/1.34M against 1.72M/1.52M msg/s with no trim at all, in
  one run of `python -m bench consume` per setting, twice).

An earlier version fixed glibc's mmap threshold at 128 KiB instead of trimming: every block over
128 KiB was then mapped and unmapped, which cut the Arrow consume rate from 1.13M to 456k msg/s in
one side-by-side run of `python -m bench consume` (2M messages).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable

import pyarrow as pa

log = logging.getLogger(__name__)


def return_freed_memory() -> Callable[[], None]:
    """Route Arrow's allocations to the C library's allocator (call once, early); returns the
    function that gives that allocator's free pages back (a no-op without glibc's malloc_trim)."""
    pa.set_memory_pool(pa.system_memory_pool())
    name = ctypes.util.find_library("c")
    try:
        malloc_trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError, TypeError):
        log.debug("no malloc_trim in this C library (%s): freed heap pages stay with the process", name)
        return lambda: None
    malloc_trim.argtypes = [ctypes.c_size_t]

    def trim_heap() -> None:
        malloc_trim(0)

    return trim_heap
