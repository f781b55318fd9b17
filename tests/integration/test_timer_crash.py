"""A broker killed with SIGKILL while it delivers timer messages delivers each once, and loses none.

Messages are parked due over 1.5 s, in an order unlike the order they were sent, a few seconds
ahead; the broker is killed as soon as the first deliveries show in the real topic, so some are
delivered, some are due and some not yet. After the restart each is stored once, in due order per
queue and none before its time (those due while the broker was down come at its start). The
duplicate window is off: the guarantee must not rest on it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from rocketspark.client.api import admin
from rocketspark.client.api.offset import get_max_offset
from rocketspark.message.properties import codec as props
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import pull_all, send
from tests.waiting import eventually

MESSAGES = 6_000
QUEUES = 4
SPREAD_MS = 1_500
LEAD_MS = 8_000  # parking MESSAGES takes less than this
TOPIC = "TimerAfterCrash"
WINDOW_OFF = ("--set", "duplicateWindowSeconds=0")


def due_of(i: int, first_due: int) -> int:
    return first_due + (i * 997) % SPREAD_MS


@pytest.mark.slow
async def test_a_kill_mid_delivery_delivers_each_timer_message_once(servers: ServerFactory, tmp_path: Path) -> None:
    namesrv = servers.namesrv()
    data_dir = tmp_path / "broker-data"
    client = RemotingClient(request_timeout_s=10)
    try:
        broker = servers.broker(namesrv.address, *WINDOW_OFF, data_dir=data_dir)
        await admin.create_topic(client, broker.address, TopicConfig(TOPIC, QUEUES, QUEUES))
        first_due = int(time.time() * 1000) + LEAD_MS
        pending = iter(range(MESSAGES))

        async def sender() -> None:
            for i in pending:
                due = str(due_of(i, first_due))
                await send(client, broker.address, TOPIC, b"t%05d" % i, queue_id=i % QUEUES, TIMER_DELIVER_MS=due)

        await asyncio.gather(*(sender() for _ in range(32)))
        assert time.time() * 1000 < first_due - 500, "parking took longer than LEAD_MS"

        async def delivered() -> bool:
            return sum([await get_max_offset(client, broker.address, TOPIC, q) for q in range(QUEUES)]) > 0

        await eventually(delivered, timeout_s=LEAD_MS / 1000 + 5, interval_s=0.01, what="the first deliveries")
        broker.kill()
        assert time.time() * 1000 < first_due + SPREAD_MS, "the kill came after every message was due"

        restarted = servers.broker(namesrv.address, *WINDOW_OFF, data_dir=data_dir)

        async def all_delivered() -> bool:
            stored = [await get_max_offset(client, restarted.address, TOPIC, q) for q in range(QUEUES)]
            return sum(stored) >= MESSAGES

        await eventually(all_delivered, timeout_s=30, what="every timer message delivered")
        await asyncio.sleep(0.5)  # a duplicate would show by now
        bodies: list[bytes] = []
        for queue_id in range(QUEUES):
            stored = await pull_all(client, restarted.address, TOPIC, queue_id)
            bodies += [m.body for m in stored]
            dues = [int(m.properties[props.TIMER_OUT_MS]) for m in stored]
            assert dues == sorted(dues), f"queue {queue_id} is not in due order"
            assert all(m.store_timestamp >= int(m.properties[props.TIMER_OUT_MS]) for m in stored), "one came early"
        assert len(bodies) == len(set(bodies)), f"{len(bodies) - len(set(bodies))} timer messages stored twice"
        assert sorted(bodies) == [b"t%05d" % i for i in range(MESSAGES)]
    finally:
        await client.close()
