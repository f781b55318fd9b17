"""A broker killed with SIGKILL while it delivers a run of delayed messages delivers each once.

The messages are parked under a delay of an hour, then the broker restarts with every level at one
second: all of them fall due in its first tick, which delivers them step after step. The broker is
killed as soon as the first deliveries show in the real topic, so deliveries are stored that the
delivery progress on disk does not count yet. The duplicate window is off: the guarantee must not
rest on it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from rocketspark.client.api import admin
from rocketspark.client.api.offset import get_max_offset
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import pull_all, send
from tests.waiting import eventually

MESSAGES = 12_000
QUEUES = 4
RUN = 300  # consecutive messages for one queue: several runs in each step of the schedule service
TOPIC = "DueAfterCrash"
WINDOW_OFF = ("--set", "duplicateWindowSeconds=0")


async def park(client: RemotingClient, broker: str) -> None:
    """Send MESSAGES delayed messages (level 1), RUN at a time to each queue in turn."""
    pending = iter(range(MESSAGES))

    async def sender() -> None:
        for i in pending:
            await send(client, broker, TOPIC, b"d%05d" % i, queue_id=(i // RUN) % QUEUES, DELAY="1", UNIQ_KEY=f"U{i}")

    await asyncio.gather(*(sender() for _ in range(32)))


def persisted_progress(data_dir: Path) -> int:
    table = orjson.loads((data_dir / "config" / "delayOffset.json").read_bytes()).get("offsetTable", {})
    return int(table.get("1", 0))


@pytest.mark.slow
async def test_a_kill_mid_delivery_delivers_each_delayed_message_once(servers: ServerFactory, tmp_path: Path) -> None:
    namesrv = servers.namesrv()
    data_dir = tmp_path / "broker-data"
    client = RemotingClient(request_timeout_s=10)
    try:
        parking = servers.broker(namesrv.address, *WINDOW_OFF, "--set", "messageDelayLevel=1h", data_dir=data_dir)
        await admin.create_topic(client, parking.address, TopicConfig(TOPIC, QUEUES, QUEUES))
        await park(client, parking.address)
        parking.stop()

        delivering = servers.broker(namesrv.address, *WINDOW_OFF, "--set", "messageDelayLevel=1s", data_dir=data_dir)

        async def delivered() -> bool:
            return sum([await get_max_offset(client, delivering.address, TOPIC, q) for q in range(QUEUES)]) > 0

        first: bool = await eventually(delivered, timeout_s=30, interval_s=0.01, what="the first deliveries")
        assert first
        delivering.kill()
        assert persisted_progress(data_dir) < MESSAGES, "the kill came after the whole run was delivered"

        restarted = servers.broker(namesrv.address, *WINDOW_OFF, "--set", "messageDelayLevel=1s", data_dir=data_dir)

        await eventually(
            lambda: persisted_progress(data_dir) == MESSAGES, timeout_s=60, what="every delayed message delivered"
        )
        bodies: list[bytes] = []
        for queue_id in range(QUEUES):
            stored = await pull_all(client, restarted.address, TOPIC, queue_id)
            bodies += [m.body for m in stored]
            assert {m.queue_id for m in stored} <= {queue_id}
        assert len(bodies) == len(set(bodies)), f"{len(bodies) - len(set(bodies))} delayed messages stored twice"
        assert sorted(bodies) == [b"d%05d" % i for i in range(MESSAGES)]
    finally:
        await client.close()
