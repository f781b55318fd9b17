"""The local offset store does its file work off the client's event loop (issue 24 item 6)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketspark import MessageModel
from rocketspark.client.config import ClientConfig
from rocketspark.client.consumer.offset_store import LocalFileOffsetStore
from tests.client.conftest import Cluster
from tests.client.test_push_consumer import Recorder, create_topic, exactly, push_consumer, send_round_robin
from tests.waiting import eventually


class FsyncCalls:
    """os.fsync, recording for each call whether its thread runs an event loop."""

    def __init__(self) -> None:
        self.on_loop: list[str] = []
        self.off_loop = 0
        self.lock = threading.Lock()

    def wrap(self, real: object) -> object:
        def fsync(fd: int) -> None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                with self.lock:
                    self.off_loop += 1
            else:
                with self.lock:
                    self.on_loop.append(threading.current_thread().name)
            real(fd)  # type: ignore[operator]

        return fsync

    def count(self) -> int:
        with self.lock:
            return self.off_loop + len(self.on_loop)


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[FsyncCalls]:
    calls = FsyncCalls()
    monkeypatch.setattr(os, "fsync", calls.wrap(os.fsync))
    yield calls


async def test_broadcasting_push_consumer_persists_offsets_off_the_loop(
    cluster: Cluster, tmp_path: Path, fsyncs: FsyncCalls
) -> None:
    topic, group = "PushOffsetFile", "push_offset_file"
    await create_topic(cluster, topic, 2)
    recorder = Recorder()
    consumer = push_consumer(
        cluster,
        group,
        recorder,
        topic,
        message_model=MessageModel.BROADCASTING,
        offset_store_dir=tmp_path,
        client_config=ClientConfig(namesrv_addr=cluster.namesrv_addr, persist_consumer_offset_interval_ms=100),
    )
    await consumer.start()
    try:
        await eventually(lambda: len(consumer.assignment()) == 2, timeout_s=10, what="every queue")
        bodies = [f"kept {i}".encode() for i in range(20)]
        await send_round_robin(cluster, topic, bodies)
        await eventually(exactly([recorder], bodies), timeout_s=10, what="every message")
        # the periodic persist writes the file (fsyncs the file and its directory) while serving
        await eventually(lambda: fsyncs.count() >= 4, timeout_s=10, what="two periodic persists")
    finally:
        await consumer.shutdown()
    assert fsyncs.on_loop == []
    (offsets_file,) = await asyncio.to_thread(lambda: list(tmp_path.glob(f"*/{group}/offsets.json")))
    store = LocalFileOffsetStore(offsets_file.parent.parent, group)
    await store.load()
    assert sum(store.table.values()) == len(bodies)  # the file holds what was consumed
