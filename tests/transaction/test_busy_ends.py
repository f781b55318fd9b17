"""Ends on a busy broker store each commit once (through the real producer and broker).

A broker whose store takes two requests at a time (`sendThreadPoolQueueCapacity=2`) answers most of
many ENDs sent at once SYSTEM_BUSY, and the producer sends those again. An END whose commit was
stored is done, even when the store then refuses its end record: it is answered SUCCESS (as Apache's
EndTransactionProcessor answers the commit it stored) and counted, so no END is sent again after a
stored commit and no row is stored twice, on either flavor (the duplicate window off). A range end
whose commit the store refuses goes on, sent again, where it stopped.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pytest

from rocketspark.client.producer.transaction import AsyncTransactionProducer, HalfMessage, TransactionStatus
from rocketspark.message.batches.producer import producer_batch
from rocketspark.message.message import Message
from rocketspark.protocol.queue import MessageQueue
from tests.harness import ServerFactory
from tests.integration.broker_client import pull_all
from tests.transaction.conftest import Cluster, RecordingListener
from tests.transaction.test_half_batches import two_queues

BUSY = ("sendThreadPoolQueueCapacity=2", "duplicateWindowSeconds=0", "transactionCheckInterval=600000")
HALVES = 300


@pytest.fixture(params=["default", "apache"])
def busy(request: pytest.FixtureRequest, servers: ServerFactory) -> Iterator[Cluster]:
    settings = [*BUSY, *(("flavor=apache",) if request.param == "apache" else ())]
    namesrv = servers.namesrv()
    yield Cluster(namesrv, servers.broker(namesrv.address, *(a for s in settings for a in ("--set", s))))


async def test_ends_answered_busy_and_sent_again_store_each_row_once(busy: Cluster, remoting_client) -> None:
    queues = await two_queues(remoting_client, busy, "BusyEnds")
    producer = AsyncTransactionProducer(
        "busy_ends", RecordingListener(TransactionStatus.UNKNOWN), client_config=busy.client_config()
    )
    async with producer as tx:
        halves: list[HalfMessage] = []
        for start in range(0, HALVES, 50):
            sent = await asyncio.gather(
                *(
                    tx.send_half(Message("BusyEnds", f"row {i}".encode()), queue=queues[i % 2], timeout_ms=30_000)
                    for i in range(start, start + 50)
                )
            )
            halves += [half for _, half in sent]
        for start in range(0, HALVES, 50):
            await asyncio.gather(
                *(
                    tx.end_transaction(h, TransactionStatus.COMMIT, wait=True, timeout_ms=30_000)
                    for h in halves[start : start + 50]
                )
            )
        pulled = [await pull_all(remoting_client, busy.broker.address, "BusyEnds", q) for q in (0, 1)]
        stored = Counter(m.body.decode() for messages in pulled for m in messages)
    assert stored == Counter(f"row {i}" for i in range(HALVES))


async def test_a_range_end_on_a_busy_broker_stores_each_row_once(servers: ServerFactory, remoting_client) -> None:
    namesrv = servers.namesrv()
    cluster = Cluster(namesrv, servers.broker(namesrv.address, *(a for s in BUSY for a in ("--set", s))))
    queues = await two_queues(remoting_client, cluster, "BusyRange")
    producer = AsyncTransactionProducer(
        "busy_range", RecordingListener(TransactionStatus.UNKNOWN), client_config=cluster.client_config()
    )
    async with producer as tx:
        sent = []
        for step in range(40):
            rows = producer_batch(pa.table({"body": [f"row {step}-{i}".encode() for i in range(100)]}))
            result = await tx.send_half_batch(
                rows, queues[step % 2], transaction_id="busy", properties={}, timeout_ms=30_000
            )
            assert result is not None
            sent.append(result)
        first, last = min(r.queue_offset for r in sent), max(r.queue_offset + r.count - 1 for r in sent)
        others = [  # other traffic meanwhile: the store is busy with it too
            tx.send_half(
                Message("BusyRange", b"other"), queue=MessageQueue("BusyRange", "broker-a", 0), timeout_ms=30_000
            )
            for _ in range(100)
        ]
        ended, *_ = await asyncio.gather(
            tx.end_range(
                "broker-a", "busy", first, last, TransactionStatus.COMMIT, topic="BusyRange", timeout_ms=30_000
            ),
            *others,
        )
        assert ended == 4_000
        stored = [
            m.body.decode()
            for q in (0, 1)
            for m in await pull_all(remoting_client, cluster.broker.address, "BusyRange", q)
        ]
    assert Counter(stored) == Counter(f"row {s}-{i}" for s in range(40) for i in range(100))
    for queue_id in (0, 1):  # each queue's rows in their order
        mine = [b for b in stored if int(b.split()[1].split("-")[0]) % 2 == queue_id]
        assert mine == sorted(mine, key=lambda b: tuple(int(x) for x in b.split()[1].split("-")))
