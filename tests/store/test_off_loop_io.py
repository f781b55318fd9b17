"""Blocking disk work stays off the event loop: config files' fsyncs, retention's unlinks; and
retention never closes a segment under a running read.

The tests observe (never replace) `os.fsync`, `os.unlink` and `os.pread` to see which thread calls
them; a read is held inside the real `os.pread` call path to overlap it with retention.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.managers.consumer_offset_manager import ConsumerOffsetManager
from broker.managers.subscription_group_manager import SubscriptionGroupManager
from broker.managers.topic_config_manager import TopicConfigManager
from broker.store.results import GetStatus
from namesrv.kvconfig_manager import KVConfigManager
from rocketspark.fileutil import AtomicFileWriter
from rocketspark.protocol.body.topic import TopicConfig
from tests.store.conftest import StoreFactory, message


def observe(monkeypatch: pytest.MonkeyPatch, name: str) -> list[tuple[str, Any]]:
    """Record (thread name, first argument) of every call of `os.<name>`, then make the call."""
    calls: list[tuple[str, Any]] = []
    original: Callable[..., Any] = getattr(os, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append((threading.current_thread().name, args[0] if args else None))
        return original(*args, **kwargs)

    monkeypatch.setattr(os, name, wrapper)
    return calls


async def test_config_files_are_fsynced_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fsyncs = observe(monkeypatch, "fsync")
    loop_thread = threading.current_thread().name
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="config-io") as io:
        writers = {
            name: AtomicFileWriter(tmp_path / name, io)
            for name in ("topics.json", "subscriptionGroup.json", "consumerOffset.json", "kvConfig.json")
        }
        topics = TopicConfigManager(BrokerConfig(), writers["topics.json"], lambda: None)
        topics.load()
        topics.put(TopicConfig("Orders", 4, 4))
        SubscriptionGroupManager(writers["subscriptionGroup.json"], auto_create=True).find("readers")
        offsets = ConsumerOffsetManager(writers["consumerOffset.json"])
        offsets.commit("readers", "Orders", 0, 42)
        kv = KVConfigManager(writers["kvConfig.json"])
        kv.put("ns", "k", "v")
        await offsets.persist()
        for writer in writers.values():
            await writer.flush()
    assert fsyncs, "nothing was fsynced"
    assert {thread for thread, _ in fsyncs} != {loop_thread}
    assert all(thread.startswith("config-io") for thread, _ in fsyncs), fsyncs
    assert b'"Orders"' in (tmp_path / "topics.json").read_bytes()
    assert b"42" in (tmp_path / "consumerOffset.json").read_bytes()
    assert b'"k"' in (tmp_path / "kvConfig.json").read_bytes()
    assert b'"readers"' in (tmp_path / "subscriptionGroup.json").read_bytes()


async def test_retention_waits_for_running_reads_and_unlinks_off_the_loop(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await open_store(
        mapped_file_size_commit_log=2048, file_reserved_time=0.5 / 3600, delete_when="*", batch_cache_bytes=1
    )
    bodies = [b"old%02d" % i + b"x" * 200 for i in range(20)]
    for body in bodies:
        await store.put_messages("T", 0, [message(body)])
    past = time.time() - 10
    for segment in store.commit_log.segments:
        os.utime(segment.path, (past, past))
    await store.put_messages("T", 0, [message(b"new")])  # keeps the current segment fresh
    oldest = store.commit_log.segments[0]

    # hold the first cold read of the oldest segment inside its os.pread call
    reading, release = threading.Event(), threading.Event()
    original_pread = os.pread

    def held_pread(fd: int, length: int, offset: int) -> bytes:
        if fd == oldest.fd and not reading.is_set():
            reading.set()
            release.wait(10)
        return original_pread(fd, length, offset)

    monkeypatch.setattr(os, "pread", held_pread)
    unlinks = observe(monkeypatch, "unlink")
    read = asyncio.ensure_future(store.get_messages("T", 0, 0, max_messages=1, max_bytes=1 << 20))
    assert await asyncio.to_thread(reading.wait, 10), "the read never reached the disk"
    retention = asyncio.ensure_future(store.retention.delete_expired())
    await asyncio.sleep(0.3)
    assert store.commit_log.segments[0] is not oldest  # forgotten at once: no new read can reach it
    assert not retention.done()  # but its file stays open and on disk while the read runs
    assert oldest.path.exists()
    os.fstat(oldest.fd)
    release.set()
    result = await asyncio.wait_for(read, 10)
    await asyncio.wait_for(retention, 10)
    assert result.status is GetStatus.FOUND
    assert [b.column("body")[0].as_py() for b in result.batches()] == [bodies[0]]
    assert not oldest.path.exists()
    loop_thread = threading.current_thread().name
    deleted = [thread for thread, path in unlinks if Path(path) == oldest.path]
    assert deleted and all(thread != loop_thread and thread.startswith("store-io") for thread in deleted), unlinks


def loop_file_reads(monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """Observe `os.open` (by path) and `os.pread` (by descriptor) from now on."""
    return observe(monkeypatch, "open"), observe(monkeypatch, "pread")


async def test_key_lookups_read_index_files_on_reader_threads_and_skip_files_outside_the_range(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = {"mapped_file_size_commit_log": 4096, "batch_cache_bytes": 1}
    store = await open_store(**settings)
    for i in range(12):  # several segments, so several index files, all before `middle`
        await store.put_messages("T", 0, [message(b"early%02d" % i + b"x" * 400, keys="k1 early")])
    await asyncio.sleep(0.02)
    middle = int(time.time() * 1000)
    await asyncio.sleep(0.02)
    segment_of_middle = store.commit_log.max_offset
    for i in range(12):
        await store.put_messages("T", 0, [message(b"late%02d" % i + b"x" * 400, keys="k1 late")])
    await store.stop()
    store = await open_store(**settings)  # every index entry and slot table on disk
    early_files = [f.path for start, f in store.index.files.items() if start < segment_of_middle - 4096]
    late_files = [f.path for start, f in store.index.files.items() if start >= segment_of_middle]
    assert early_files and late_files

    opens, preads = loop_file_reads(monkeypatch)
    found = await store.query_by_key("T", "k1", 100, middle, 2**62, unique_key=False)
    assert [m["body"][:6] for m in found] == [b"late%02d" % i for i in reversed(range(12))]
    opened = {Path(path): thread for thread, path in opens if isinstance(path, (str, Path))}
    assert not set(early_files) & set(opened), "an index file outside the time range was opened"
    assert set(late_files) <= set(opened)
    loop_thread = threading.current_thread().name
    assert all(thread != loop_thread for thread, _ in opens + preads), (opens, preads)

    opens.clear()
    everything = await store.query_by_key("T", "k1", 100, 0, 2**62, unique_key=False)
    assert len(everything) == 24
    assert set(early_files) <= {Path(path) for _, path in opens if isinstance(path, (str, Path))}


async def test_cold_consume_queue_blocks_and_the_time_search_are_read_on_reader_threads(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = {"consume_queue_cache_bytes": 1, "mapped_file_size_consume_queue": 20 * 1500}
    store = await open_store(**settings)
    stamps = []
    for i in range(10):
        await store.put_messages("T", 0, [message(b"m%d-%d" % (i, j)) for j in range(400)])
        stamps.append(int(time.time() * 1000))
        await asyncio.sleep(0.005)
    await store.stop()
    store = await open_store(**settings)  # nothing cached: every entry below the tail is on disk

    opens, preads = loop_file_reads(monkeypatch)
    result = await store.get_messages("T", 0, 100, max_messages=2000, max_bytes=1 << 30)
    assert result.status is GetStatus.FOUND
    bodies = [b for batch in result.batches() for b in batch.column("body").to_pylist()]
    assert bodies == [b"m%d-%d" % divmod(o, 400) for o in range(100, 2100)]
    expected = [await store.offset_for_timestamp("T", 0, stamp + 1) for stamp in stamps[:-1]]
    assert expected == [400 * (i + 1) for i in range(9)]
    assert await store.offset_for_timestamp("T", 0, 0) == 0
    assert await store.earliest_store_time("T", 0) <= stamps[0]
    assert stamps[0] - 1000 < await store.store_time_at("T", 0, 5) <= stamps[0]
    stats = await store.queue_stats("T", 0)
    assert (stats.min_offset, stats.max_offset) == (0, 4000)
    due = await store.stored_by("T", 0, 0, stamps[1], 4000)
    assert due == (0, 800)
    assert preads, "nothing was read from disk"
    loop_thread = threading.current_thread().name
    on_loop = [(path, thread) for thread, path in opens if thread == loop_thread]
    assert not on_loop and all(thread != loop_thread for thread, _ in preads), on_loop
