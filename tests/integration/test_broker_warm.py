"""The broker imports no module once it serves: an import on the event loop stalls every request in flight.

Issue 24: overlapping sends stalled once per broker start for about 200 ms. The first round of more
than `SMALL_ROUND` standard sends built its key array with `pa.array(list)`, and pyarrow imports
pandas the first time it converts Python objects (about 0.2 s on a quiet machine, on the loop). The
broker runs with `PYTHONPROFILEIMPORTTIME=1`, so Python writes a line to its log (stderr) for every
module it imports; none may follow the boot.
"""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pytest

from rocketspark import AsyncLitePullConsumer, AsyncProducer, ConsumeFromWhere, Message
from tests.harness import ServerFactory

TOPIC = "WarmTopic"
OVERLAPPING = 200  # sends in flight at once: the writer's rounds hold far more than SMALL_ROUND (24)


def imports_logged(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("import time:")]


async def test_serving_overlapping_sends_batches_arrow_and_pulls_imports_nothing(
    servers: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address)
    monkeypatch.delenv("PYTHONPROFILEIMPORTTIME")
    booted = broker.log_path.read_text()
    assert imports_logged(booted), "the broker's start-up imports are logged (the check below can see imports)"
    async with AsyncProducer("warm_producer", namesrv_addr=namesrv.address) as producer:
        await producer.send(Message(TOPIC, b"first"))  # creates the topic
        results = await asyncio.gather(*(producer.send(Message(TOPIC, b"x%d" % i)) for i in range(OVERLAPPING)))
        await producer.send_batch([Message(TOPIC, b"b%d" % i) for i in range(50)])
        await producer.send_arrow(pa.table({"body": [b"a%d" % i for i in range(50)]}), TOPIC)
        # the same keys again: duplicates of the window, their bodies compared with the first copies
        await producer.send_arrow(
            pa.table({"body": [b"d%d" % i for i in range(40)], "uniq_key": [f"K{i}" for i in range(40)]}), TOPIC
        )
        await producer.send_arrow(
            pa.table({"body": [b"d%d" % i for i in range(40)], "uniq_key": [f"K{i}" for i in range(40)]}), TOPIC
        )
    assert len(results) == OVERLAPPING
    consumer = AsyncLitePullConsumer(
        "warm_reader", namesrv_addr=namesrv.address, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    consumer.subscribe(TOPIC)
    read = 0
    async with consumer, asyncio.timeout(60):
        while read < 1 + OVERLAPPING + 50 + 50 + 40:
            read += len(await consumer.poll(1_000))
    served = broker.log_path.read_text()[len(booted) :]
    assert imports_logged(served) == []
