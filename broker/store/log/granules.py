"""The records of granules, as lookups of messages by commit log offset need them.

A lookup turns an offset into its record and row from the record starts and row counts of the
granule holding it (broker/store/log/record_positions.py). This module keeps what those lookups read:

- the granules read last (complete ones only: their records never change), up to a bound;
- the granule being written, whose records are known as they are registered (:class:`OpenGranule`):
  a lookup of a message just written (the end of a transaction, a send back, a duplicate's first
  copy) reads no headers and needs no thread;
- reads under way: lookups at the same time wait for one read of a granule instead of each reading
  it (the ends of a transactional write come many at once, for the same granules).
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeAlias

import numpy as np

from broker.store.log.record_positions import GRANULE, RecordPositions

#: (record starts in the segment's file, row counts) of the records holding bytes of a granule
Records: TypeAlias = tuple[np.ndarray, np.ndarray]
Key: TypeAlias = tuple[int, int]  # (segment serial, granule number)
_GRANULES_CACHED = 1024  # complete granules kept (about 10 MiB at most)


class Granular(Protocol):
    """What this module needs of a commit log segment."""

    serial: int
    fd: int
    size: int
    positions: RecordPositions


def _complete(segment: Granular, number: int) -> bool:
    """Whether every record holding bytes of the granule is written (they never change then)."""
    return (number + 1) * GRANULE < segment.size


def _read(granules: list[tuple[Granular, int, int]]) -> list[Records]:
    """The records of granules, each given with its segment and that segment's size (blocking)."""
    return [segment.positions.granule(segment.fd, number, size) for segment, number, size in granules]


class OpenGranule:
    """The records holding bytes of the granule being written (the last one of the segment being
    written), kept as they are registered: a lookup of a recent message (the end of a transaction,
    a send back, a duplicate's first copy) then reads no headers from disk, and needs no thread.
    Once the log moves past it, the granule is complete and read from disk like any other.

    Bounded: a commit log record takes at least 107 bytes (its header and one message record), so a
    granule holds at most 612 of them."""

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None  # (segment serial, granule number)
        self._complete = False  # every record of the granule so far is here
        self._starts: list[int] = []
        self._rows: list[int] = []

    def add(self, serial: int, position: int, length: int, rows: int) -> None:
        """A record of `rows` messages registered at `position` of segment `serial`, its end until now."""
        number = (position + length - 1) // GRANULE
        if self._key != (serial, number):
            # its first record holds the granule's first byte; but not after a recovery, whose
            # records before this one are not here (their granule is then read from disk)
            self._key = (serial, number)
            self._complete = position <= number * GRANULE
            self._starts, self._rows = [], []
        self._starts.append(position)
        self._rows.append(rows)

    def records(self, serial: int, number: int) -> Records | None:
        """What :meth:`RecordPositions.granule` reads from disk, when this is that granule."""
        if self._key != (serial, number) or not self._complete:
            return None
        return np.array(self._starts, dtype=np.int64), np.array(self._rows, dtype=np.int64)

    def forget(self) -> None:
        self._key = None


class GranuleCache:
    """The granules' records a commit log's lookups use (event loop). Blocking reads go to
    `reader` (a reader thread, once the store serves; None: inline); `live` says whether a
    segment is still in the log, so that a granule of a segment deleted meanwhile is not kept."""

    def __init__(self, live: Callable[[Granular], bool]) -> None:
        self.reader: Callable[[Callable[[], Any]], Awaitable[Any]] | None = None
        self.open = OpenGranule()
        self._live = live
        self._kept: OrderedDict[Key, Records] = OrderedDict()
        self._loading: dict[Key, asyncio.Future[dict[Key, Records]]] = {}

    async def records(self, wanted: Sequence[tuple[Granular, int]]) -> dict[Key, Records]:
        """The records of each (segment, granule number), read from disk where not known."""
        found: dict[Key, Records] = {}
        missing: list[tuple[Granular, int]] = []
        for segment, number in wanted:
            key = (segment.serial, number)
            if key in self._kept:
                self._kept.move_to_end(key)
                found[key] = self._kept[key]
            elif (records := self.open.records(segment.serial, number)) is not None:
                found[key] = records
            else:
                missing.append((segment, number))
        if missing:
            waits = {self._loading[(s.serial, n)] for s, n in missing if (s.serial, n) in self._loading}
            new = [(s, n) for s, n in missing if (s.serial, n) not in self._loading]
            if new:
                read = asyncio.ensure_future(self._load(new))
                shared = [(s.serial, n) for s, n in new if _complete(s, n)]  # no later lookup needs more
                self._loading.update(dict.fromkeys(shared, read))
                read.add_done_callback(functools.partial(self._loaded, shared))
                waits.add(read)
            for wait in waits:
                found.update(await asyncio.shield(wait))
        return found

    def _loaded(self, keys: list[Key], _: asyncio.Future[dict[Key, Records]]) -> None:
        for key in keys:
            del self._loading[key]

    async def _load(self, granules: list[tuple[Granular, int]]) -> dict[Key, Records]:
        load = functools.partial(_read, [(s, n, s.size) for s, n in granules])
        loaded: list[Records] = await self.reader(load) if self.reader is not None else load()
        for (segment, number), records in zip(granules, loaded, strict=True):
            if _complete(segment, number) and self._live(segment):
                self._kept[(segment.serial, number)] = records
                while len(self._kept) > _GRANULES_CACHED:
                    self._kept.popitem(last=False)
        return {(s.serial, n): records for (s, n), records in zip(granules, loaded, strict=True)}

    def forget(self, serial: int) -> None:
        """Drop what is kept of a segment leaving the log."""
        for key in [k for k in self._kept if k[0] == serial]:
            del self._kept[key]

    def clear(self) -> None:
        self._kept.clear()
        self.open.forget()
