"""`consume`: a lite-pull consumer reading stored 128-byte messages, standard records vs Arrow.

The messages are stored first with Arrow sends (not measured). "standard" polls MessageExt objects
decoded from PULL_MESSAGE records; "arrow" polls record batches from the Arrow pull. Every message
must arrive exactly once: the received count per queue is checked against the queue's max offset.
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.cluster import Cluster, cluster
from bench.ingest import QUEUES, drive, prepare_topic
from bench.report import progress, record
from bench.soak_report import cpu_seconds
from rocketspark import AsyncLitePullConsumer, AsyncProducer, ConsumeFromWhere, Message
from rocketspark.client.api import offset
from rocketspark.remoting.client import RemotingClient

TOPIC = "BenchIngest"
BODY = b"x" * 128
CHUNK = 10_000
#: single sends in flight when preloading with them (ingest's `single` mode, `producer.sh -w 64`)
SINGLE_IN_FLIGHT = 64


async def preload(target: Cluster, count: int, *, keys: bool = False, topic: str = TOPIC) -> None:
    """Store `count` messages with Arrow sends; with `keys`, message n has the key `key_of(n)`."""
    await prepare_topic(target, topic)
    table = pa.table({"body": pa.array([BODY] * CHUNK, pa.binary())})
    async with AsyncProducer("bench_preload", namesrv_addr=target.namesrv_addr, send_timeout_ms=30_000) as producer:
        sent = 0
        while sent < count:
            rows = min(CHUNK, count - sent)
            chunk = table.slice(0, rows)
            if keys:
                numbers = pc.cast(pa.array(np.arange(sent, sent + rows)), pa.string())
                chunk = chunk.append_column("keys", pc.binary_join_element_wise("k", numbers, ""))
            await producer.send_arrow(chunk, topic)
            sent += rows
            if sent % 500_000 == 0:
                progress(f"stored {sent:,} messages")


async def preload_single(target: Cluster, count: int, topic: str) -> float:
    """Store `count` messages with single SEND_MESSAGE_V2 sends, SINGLE_IN_FLIGHT at a time, as
    ingest's `single` mode sends them; returns the sends acknowledged a second."""
    await prepare_topic(target, topic)
    producer = AsyncProducer("bench_preload_single", namesrv_addr=target.namesrv_addr, send_timeout_ms=30_000)
    async with producer:
        tally, elapsed = await drive(
            SINGLE_IN_FLIGHT, 1, float("inf"), count, lambda: producer.send(Message(topic, BODY))
        )
    if tally.messages != count:
        raise RuntimeError(f"{tally.messages:,} of {count:,} single sends acknowledged")
    return tally.messages / elapsed


def key_of(n: int) -> str:
    return f"k{n}"


async def max_offsets(target: Cluster, topic: str = TOPIC) -> dict[int, int]:
    remoting = RemotingClient()
    try:
        return {q: await offset.get_max_offset(remoting, target.broker.address, topic, q) for q in range(QUEUES)}
    finally:
        await remoting.close()


async def read_all(target: Cluster, arrow: bool, expected: int, seconds: float) -> tuple[int, float, Counter[int]]:
    consumer = AsyncLitePullConsumer(
        f"bench_consume_{'arrow' if arrow else 'standard'}",
        namesrv_addr=target.namesrv_addr,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        arrow=arrow,
        pull_batch_size=100_000 if arrow else 1_024,
        pull_threshold_for_queue=200_000 if arrow else 20_000,
        auto_commit=False,
    )
    per_queue: Counter[int] = Counter()
    received = 0
    async with consumer:
        consumer.subscribe(TOPIC)
        started = time.perf_counter()
        deadline = started + seconds
        while received < expected and time.perf_counter() < deadline:
            for item in await consumer.poll(1_000):
                if arrow:
                    assert isinstance(item, pa.RecordBatch)
                    per_queue.update(dict(zip(*_count_by_queue(item), strict=True)))
                    received += item.num_rows
                else:
                    per_queue[item.queue_id] += 1  # type: ignore[union-attr]
                    received += 1
        elapsed = time.perf_counter() - started
    return received, elapsed, per_queue


def _count_by_queue(batch: pa.RecordBatch) -> tuple[list[int], list[int]]:
    counts = batch.column("queue_id").value_counts()
    return counts.field("values").to_pylist(), counts.field("counts").to_pylist()


async def main(seconds: float, limit: int) -> None:
    rows = []
    with cluster() as target:
        progress(f"storing {limit:,} messages")
        await preload(target, limit)
        expected = await max_offsets(target)
        total = sum(expected.values())
        for arrow in (False, True):
            cpu_before = cpu_seconds(target.broker.pid)
            received, elapsed, per_queue = await read_all(target, arrow, total, max(seconds, 60.0))
            broker_us = (cpu_seconds(target.broker.pid) - cpu_before) / max(received, 1) * 1e6
            complete = received == total and dict(per_queue) == {q: n for q, n in expected.items() if n}
            rate = received / elapsed
            progress(
                f"{'arrow' if arrow else 'standard':8} {received:,} in {elapsed:.1f} s: {rate:,.0f} msg/s, "
                f"broker CPU {broker_us:.2f} µs/msg"
            )
            row = ["arrow" if arrow else "standard", received, round(elapsed, 1), round(rate), round(broker_us, 2)]
            rows.append([*row, complete])
    record(
        "consume",
        ["records", "messages", "seconds", "msg/s", "broker CPU µs/msg", "all exactly once"],
        rows,
        {"body_bytes": len(BODY), "queues": QUEUES, "stored": total},
    )
