"""A broker killed with SIGKILL under load loses no acknowledged message."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict

import pytest

from rocketspark.client.api import admin
from rocketspark.errors import RocketMQError
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import pull_all, send
from tests.waiting import eventually

QUEUES = 8


@pytest.mark.slow
@pytest.mark.parametrize("flush", ["sync", "async"])
async def test_kill_minus_nine_loses_no_acknowledged_message(servers: ServerFactory, tmp_path, flush: str) -> None:
    namesrv = servers.namesrv()
    data_dir = tmp_path / "broker-data"
    settings = ["--flush", flush, "--set", "mappedFileSizeCommitLog=65536"]
    broker = servers.broker(namesrv.address, *settings, data_dir=data_dir)
    client = RemotingClient(request_timeout_s=5)
    await admin.create_topic(client, broker.address, TopicConfig("Crash", QUEUES, QUEUES))
    acknowledged: dict[int, list[tuple[int, bytes]]] = defaultdict(list)  # queue -> [(offset, body)]
    attempted: set[bytes] = set()
    stop = asyncio.Event()

    async def producer(queue_id: int) -> None:
        """One sequential sender per queue, no retries: an exception means "not acknowledged"."""
        sequence = 0
        while not stop.is_set():
            body = f"q{queue_id}-{sequence:06d}".encode()
            attempted.add(body)
            sequence += 1
            try:
                result = await send(client, broker.address, "Crash", body, queue_id=queue_id)
            except RocketMQError:
                return
            acknowledged[queue_id].append((result.queue_offset, body))

    senders = [asyncio.ensure_future(producer(q)) for q in range(QUEUES)]
    await eventually(lambda: sum(len(v) for v in acknowledged.values()) >= 2000, timeout_s=60, what="2,000 sends")
    broker.kill()
    stop.set()
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.gather(*senders, return_exceptions=True), 10)
    await client.close()

    restarted = servers.broker(namesrv.address, *settings, data_dir=data_dir)
    reader = RemotingClient(request_timeout_s=10)
    try:
        total = 0
        for queue_id in range(QUEUES):
            stored = await pull_all(reader, restarted.address, "Crash", queue_id)
            by_offset = {m.queue_offset: m.body for m in stored}
            bodies = [m.body for m in stored]
            assert len(bodies) == len(set(bodies)), f"queue {queue_id} holds a message twice"
            assert set(bodies) <= attempted
            for queue_offset, body in acknowledged[queue_id]:
                assert by_offset.get(queue_offset) == body, f"acknowledged {body!r} missing at offset {queue_offset}"
            assert [m.queue_offset for m in stored] == list(range(len(stored)))  # dense, in send order
            assert bodies == sorted(bodies)
            total += len(acknowledged[queue_id])
        assert total >= 2000
    finally:
        await reader.close()


async def test_a_topic_acknowledged_as_created_survives_kill_minus_nine(servers: ServerFactory, tmp_path) -> None:
    """UPDATE_AND_CREATE_TOPIC is answered once topics.json is on disk: a broker killed right after
    the answer comes back with every topic it acknowledged (they were once written by a thread after
    the answer, and a restarted broker could miss the last ones)."""
    namesrv = servers.namesrv()
    data_dir = tmp_path / "broker-data"
    broker = servers.broker(namesrv.address, data_dir=data_dir)
    client = RemotingClient(request_timeout_s=5)
    try:
        names = [f"Kept{i}" for i in range(20)]
        for name in names:
            await admin.create_topic(client, broker.address, TopicConfig(name, 2, 2))
        broker.kill()
    finally:
        await client.close()
    restarted = servers.broker(namesrv.address, data_dir=data_dir)
    reader = RemotingClient(request_timeout_s=5)
    try:
        configs = await admin.get_all_topic_config(reader, restarted.address)
    finally:
        await reader.close()
    assert set(names) <= set(configs.topic_config_table)
