"""The duplicate window as the commit log writer uses it: one object, one check per commit round.

The writer asks :meth:`DuplicateChecker.prepare` for the key hashes of each send as it queues it
(an Arrow batch's keys are hashed then, while the commit round before is on disk) and hands each
attempt at a commit round to :meth:`DuplicateChecker.check`, which returns what each send stores
(:class:`RoundCheck`); once the round is written and answered, :meth:`RoundCheck.remember` adds its
new keys to the window. Everything else stays behind these calls: hashing, the lookups (in the I/O
thread for large rounds: the window belongs to the writer, which checks one round at a time), and
the reads of first copies' bodies, on the event loop, which owns the commit log's segment lists
and cache (:mod:`broker.store.duplicates.round_check`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from broker.store.duplicates.round_check import (
    NO_DUPLICATES,
    CheckedSend,
    SendDuplicates,
    arrow_key_hashes,
    find_repeats,
    read_bodies,
    remember_round,
    settle,
)
from broker.store.duplicates.window import DuplicateWindow, StoredAt, deduplicated_topic
from broker.store.log.commitlog import CommitLog
from broker.store.log.stored import StoredBatch

# Rounds of at least this many rows are looked up in the duplicate window in the I/O thread, beside
# the event loop (numpy lets go of the GIL); smaller ones on the loop, where a thread hop would cost more.
IN_IO_THREAD_ROWS = 2048


@dataclass(frozen=True, slots=True)
class RoundCheck:
    """What the check of one commit round attempt decided, one :class:`SendDuplicates` per send in
    the order of its sends."""

    sends: list[SendDuplicates]
    window: DuplicateWindow

    def remember(self, store_timestamp: int, firsts: Sequence[StoredAt]) -> None:
        """Add the keys the written round stored to the window; `firsts`: where each send's first
        stored row went, in the order of its sends."""
        remember_round(self.window, store_timestamp, list(zip(self.sends, firsts, strict=True)))


class DuplicateChecker:
    """The one entry point of the duplicate window for the commit log writer (event loop).

    `batch_at`: the stored batch at a commit log position, on the event loop (the cache, or a read
    on a reader thread); the check reads the first copies of window hits with it."""

    def __init__(
        self,
        window: DuplicateWindow,
        commit_log: CommitLog,
        batch_at: Callable[[int], Awaitable[StoredBatch]],
        io_executor: Executor,
    ) -> None:
        self._window = window
        self._commit_log = commit_log
        self._batch_at = batch_at
        self._executor = io_executor

    def prepare(self, send: CheckedSend) -> tuple[np.ndarray, np.ndarray] | None:
        """The key hashes of an Arrow send of a checked topic, computed as it is queued; None for
        any other send (its keys are hashed with its round's)."""
        window = self._window
        if send.arrow is not None and window.enabled and deduplicated_topic(send.topic):
            return arrow_key_hashes(send)
        return None

    async def check(self, sends: Sequence[CheckedSend], now_ms: int) -> RoundCheck:
        """The rows of a commit round attempt the window (or the round) already holds, send by send."""
        window = self._window
        if not window.enabled:
            return RoundCheck([NO_DUPLICATES] * len(sends), window)
        if sum(s.count for s in sends) >= IN_IO_THREAD_ROWS:
            loop = asyncio.get_running_loop()
            repeats = await loop.run_in_executor(self._executor, find_repeats, window, sends, now_ms)
        else:
            repeats = find_repeats(window, sends, now_ms)
        return RoundCheck(await settle(sends, repeats, self._stored_bodies), window)

    async def _stored_bodies(self, offsets: np.ndarray) -> pa.Array:
        return await read_bodies(self._commit_log, self._batch_at, offsets)
