"""A hostile peer beside honest clients (issue 41, item 10): while tests/security/hostile_flood.py floods
the broker for a few seconds with unsigned and malformed traffic (bounded counts), a signed producer
and a signed consumer run: nothing they send is lost, the producer's send p99 stays under 50 ms, the
broker's log grows by less than 1 MB and its RSS by less than 50 MiB."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocketspark import AsyncLitePullConsumer, AsyncProducer, Message, MessageQueue
from tests.security.conftest import USER, AclBroker
from tests.security.test_client_acl import create_topic

pytestmark = pytest.mark.slow

TOPIC = "HostileTopic"
FLOOD_SECONDS = 5.0
MESSAGES = 250


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_signed_clients_are_served_through_a_flood(acl_broker: AclBroker) -> None:
    namesrv, broker = acl_broker.namesrv.address, acl_broker.broker
    await create_topic(acl_broker, TOPIC)
    async with (
        AsyncProducer("hostile_producer", namesrv_addr=namesrv, credentials=USER) as producer,
        AsyncLitePullConsumer(
            "hostile_consumer", namesrv_addr=namesrv, credentials=USER, auto_commit=False
        ) as consumer,
    ):
        queues = await producer.fetch_publish_queues(TOPIC)
        consumer.assign([MessageQueue(TOPIC, q.broker_name, q.queue_id) for q in queues])
        for queue in queues:
            await consumer.seek_to_begin(MessageQueue(TOPIC, queue.broker_name, queue.queue_id))
        await producer.send(Message(TOPIC, b"warm-up"))
        received: set[bytes] = set()
        while not received:
            received.update(message.body for message in await consumer.poll(500))
        log_before, rss_before = broker.log_path.stat().st_size, rss_bytes(broker.pid)

        flood = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.security.hostile_flood",
            broker.address,
            str(FLOOD_SECONDS),
            stdout=subprocess.PIPE,
        )
        latencies: list[float] = []
        rss_peak = rss_before

        async def consume() -> None:
            while flood.returncode is None or len(received) < MESSAGES + 1:
                received.update(message.body for message in await consumer.poll(200))
                if time.monotonic() > give_up:
                    return

        give_up = time.monotonic() + FLOOD_SECONDS + 30
        consuming = asyncio.create_task(consume())
        assert flood.stdout is not None
        assert await flood.stdout.readline() == b"READY\n"
        await asyncio.sleep(0.2)  # the flood under way
        for i in range(MESSAGES):
            started = time.perf_counter()
            await producer.send(Message(TOPIC, b"signed-%d" % i))
            latencies.append(time.perf_counter() - started)
            rss_peak = max(rss_peak, rss_bytes(broker.pid))
            await asyncio.sleep(FLOOD_SECONDS / MESSAGES)
        stdout = await flood.stdout.read()
        await flood.wait()
        rss_peak = max(rss_peak, rss_bytes(broker.pid))
        await consuming

    sent = json.loads(stdout.decode().strip().splitlines()[-1].removeprefix("RESULT "))
    assert sent["answered requests"] >= 1_000 and sent["malformed frames"] >= 50, sent
    assert sent["heartbeat bytes"] >= 5_000_000 and sent["silent sockets"] >= 32, sent
    assert received == {b"warm-up"} | {b"signed-%d" % i for i in range(MESSAGES)}
    p99 = sorted(latencies)[math.ceil(len(latencies) * 0.99) - 1]
    assert p99 < 0.050, f"send p99 {p99 * 1000:.1f} ms"
    assert broker.log_path.stat().st_size - log_before < 1_000_000
    assert rss_peak - rss_before < 50 * 1024 * 1024, f"RSS grew {(rss_peak - rss_before) / 2**20:.1f} MiB"
    assert broker.running
