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

`memory_use` reports what each allocator holds (GET_BROKER_RUNTIME_INFO shows it; the soak records
it every minute), so a resident size that grows can be told apart: live data, or free space the C
library's heap keeps between live blocks.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa

log = logging.getLogger(__name__)


def _libc_function(name: str) -> Any | None:
    """The C library's function `name` (a ctypes function), or None when that library has none."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c")), name)
    except (OSError, AttributeError, TypeError):
        return None


def return_freed_memory() -> Callable[[], None]:
    """Route Arrow's allocations to the C library's allocator (call once, early); returns the
    function that gives that allocator's free pages back (a no-op without glibc's malloc_trim)."""
    pa.set_memory_pool(pa.system_memory_pool())
    malloc_trim = _libc_function("malloc_trim")
    if malloc_trim is None:
        log.debug("no malloc_trim in this C library: freed heap pages stay with the process")
        return lambda: None
    malloc_trim.argtypes = [ctypes.c_size_t]

    def trim_heap() -> None:
        malloc_trim(0)

    return trim_heap


class _MallInfo2(ctypes.Structure):
    """glibc's `struct mallinfo2` (glibc 2.33 and later): byte counts over every arena."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@functools.cache
def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    function = _libc_function("mallinfo2")
    if function is None:
        return None
    function.restype = _MallInfo2
    function.argtypes = []
    return cast(Callable[[], _MallInfo2], function)


@dataclass(frozen=True, slots=True)
class MemoryUse:
    """What each allocator of the process holds, in bytes (heap figures: None without glibc 2.33+)."""

    arrow_bytes: int  # Arrow's buffers (through the C library's allocator, see above)
    python_blocks: int  # live blocks of Python's small-object allocator
    heap_in_use_bytes: int | None  # the C library's heaps: in live blocks, Arrow's included
    heap_free_bytes: int | None  # free in those heaps, resident or not (malloc_trim returns whole pages)
    mapped_bytes: int | None  # blocks the C library mapped on their own (large ones)

    def as_table(self) -> dict[str, str]:
        figures = {
            "memoryArrowBytes": self.arrow_bytes,
            "memoryPythonBlocks": self.python_blocks,
            "memoryHeapInUseBytes": self.heap_in_use_bytes,
            "memoryHeapFreeBytes": self.heap_free_bytes,
            "memoryMappedBytes": self.mapped_bytes,
        }
        return {key: str(value) for key, value in figures.items() if value is not None}


def memory_use() -> MemoryUse:
    """Walks the C library's free lists: cheap enough for an admin request, not for every send."""
    info = _mallinfo2()
    heap = info() if info is not None else None
    return MemoryUse(
        arrow_bytes=pa.total_allocated_bytes(),
        python_blocks=sys.getallocatedblocks(),
        heap_in_use_bytes=heap.uordblks if heap is not None else None,
        heap_free_bytes=heap.fordblks if heap is not None else None,
        mapped_bytes=heap.hblkhd if heap is not None else None,
    )
