"""The store's threading rule while large rounds are checked for duplicates beside concurrent reads.

Rounds of 2,048 rows or more are checked for duplicates in the store's I/O thread. The commit log's
in-memory state (its segment lists and batch cache) belongs to the event loop: pulls change the
cache at the same time, so the check must not touch it from that thread. The test watches every
call that reads or changes that state and notes the thread it ran on.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from broker.store.log.commitlog import CommitLog
from broker.store.message_store import MessageStore
from rocketspark.message.batches.producer import producer_batch
from tests.store.conftest import StoreFactory, message
from tests.store.test_message_store import read_all

ROWS = 3_000  # rows of one send: each round is checked in the I/O thread
SENDS = 4
#: the commit log's methods that read or change its in-memory state
LOOP_ONLY = ("reserve", "register", "cached", "cache_put", "locate_many", "segment_for", "segment_holding")


def keyed_batch(send: int, rows: range) -> pa.RecordBatch:
    return producer_batch(
        pa.table({"body": [b"body %d-%d" % (send, i) for i in rows], "uniq_key": [f"K-{send}-{i}" for i in rows]})
    )


def watch_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Calls of LOOP_ONLY methods made off the calling (event loop) thread, as 'method on thread'."""
    loop_thread = threading.current_thread()
    strangers: list[str] = []

    def watched(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: CommitLog, *args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is not loop_thread:
                strangers.append(f"{name} on {threading.current_thread().name}")
            return real(self, *args, **kwargs)

        return call

    for name in LOOP_ONLY:
        monkeypatch.setattr(CommitLog, name, watched(name, getattr(CommitLog, name)))
    return strangers


async def read_until(store: MessageStore, done: asyncio.Event) -> int:
    """Pull both queues from the start, again and again, until `done`: how many passes."""
    passes = 0
    while not done.is_set():
        await read_all(store, "T", 0)
        await read_all(store, "T", 1)
        passes += 1
    return passes


async def test_large_deduplicated_rounds_beside_concurrent_reads(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    strangers = watch_threads(monkeypatch)
    # a cache smaller than one round's batch: every pull and every body compared reads from disk
    store = await open_store(duplicate_window_seconds=600, batch_cache_bytes=16 * 1024)
    firsts = [
        await store.put_arrow("T", 0, keyed_batch(s, range(ROWS)), born_timestamp=1, born_host="h:1")
        for s in range(SENDS)
    ]
    standard = [message(b"body s-%d" % i, uniq=f"S-{i}") for i in range(ROWS)]
    first_standard = await store.put_messages("T", 1, standard)

    done = asyncio.Event()
    readers = [asyncio.create_task(read_until(store, done)) for _ in range(2)]
    try:
        resent = []
        for s in range(SENDS):
            # the whole send again, and one half old, half new: both checked against the window
            resent.append(await store.put_arrow("T", 0, keyed_batch(s, range(ROWS)), born_timestamp=1, born_host="h:1"))
            half = range(ROWS // 2, ROWS + ROWS // 2)
            resent.append(await store.put_arrow("T", 0, keyed_batch(s, half), born_timestamp=1, born_host="h:1"))
        again_standard = await store.put_messages("T", 1, standard)
    finally:
        done.set()
        passes = await asyncio.gather(*readers)

    assert min(passes) >= 1
    assert strangers == []
    for s, first in enumerate(firsts):
        whole, half = resent[2 * s], resent[2 * s + 1]
        assert (whole.count, whole.duplicates) == (0, ROWS)
        assert (whole.first_queue_offset, whole.first_commit_log_offset) == (
            first.first_queue_offset,
            first.first_commit_log_offset,
        )
        assert (half.count, half.duplicates) == (ROWS // 2, ROWS // 2)
    assert (again_standard.count, again_standard.duplicates) == (0, ROWS)
    assert again_standard.commit_log_offsets == tuple(first_standard.commit_log_offsets)
    arrow_bodies = (await read_all(store, "T", 0)).column("body").to_pylist()
    assert sorted(arrow_bodies) == sorted(b"body %d-%d" % (s, i) for s in range(SENDS) for i in range(ROWS + ROWS // 2))
    assert (await read_all(store, "T", 1)).column("body").to_pylist() == [m.body for m in standard]
