"""`scale`: the broker's memory, key lookups, restart and consume rates as the store grows.

Stores of a tenth of the messages and of all of them (10M by default) are measured, each in two
shapes: "arrow", stored with Arrow sends (a few thousand commit log records), and "single", one
commit log record per message, as a producer sending one message at a time leaves them (written
with the store's own code, bench/single_records.py). Messages have 128-byte bodies over 8 queues,
each its own key and UNIQ_KEY (so the duplicate window, on by default, holds the newest million).
For each store: the broker's resident memory after the writes (for "single": once a broker
recovered the store) and after reading every message back, QUERY_MESSAGE by key (random keys,
each must be found), a clean restart (SIGTERM, start, first acknowledged send) and one after
SIGKILL, and the consume rates of the `consume` scenario: standard records over the oldest
messages, Arrow over all of them. An empty broker's clean restart is measured first, for scale.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.cluster import Cluster, cluster
from bench.consume import BODY, CHUNK, TOPIC, key_of, max_offsets, read_all
from bench.ingest import prepare_topic
from bench.report import percentiles_ms, progress, record
from bench.single_records import uniq_key_of, write_single_records
from broker.controller import TRIM_MEMORY_INTERVAL_S
from rocketspark import AsyncProducer, Message
from rocketspark.client.api import admin
from rocketspark.message.records.decoding import decode_records
from rocketspark.processes import broker_process, namesrv_process, wait_registered
from rocketspark.remoting.client import RemotingClient

LOOKUPS = 200
STANDARD_SAMPLE = 1_000_000


def resident_mib(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of a process, MiB (VmRSS and VmHWM)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def lookups(target: Cluster, stored: int) -> list[float]:
    """Seconds per QUERY_MESSAGE of a random stored key; each answer must hold that message."""
    remoting = RemotingClient()
    latencies = []
    try:
        for n in random.Random(7).sample(range(stored), LOOKUPS):
            started = time.perf_counter()
            body = await admin.query_message(remoting, target.broker.address, TOPIC, key_of(n), max_num=1)
            latencies.append(time.perf_counter() - started)
            found = decode_records(body)
            assert len(found) == 1 and found[0].keys == key_of(n), f"key {key_of(n)} not found"
    finally:
        await remoting.close()
    return latencies


async def restart_seconds(target: Cluster, *, crash: bool) -> float:
    """Stop the broker (SIGTERM, or SIGKILL for `crash`), start it on the same data, and time
    from the new process's start until it is registered and a producer's send is acknowledged."""
    if crash:
        target.broker.kill()
    else:
        target.broker.stop()
    started = time.perf_counter()
    await asyncio.to_thread(target.broker.start, 600.0)
    await asyncio.to_thread(wait_registered, target.namesrv_addr, target.broker.address, (TOPIC,), 60.0)
    async with AsyncProducer("bench_restart", namesrv_addr=target.namesrv_addr, send_timeout_ms=60_000) as producer:
        await producer.send(Message(TOPIC, BODY))
    return time.perf_counter() - started


async def preload_arrow(target: Cluster, count: int) -> None:
    """Store `count` messages with Arrow sends; message n has the key `key_of(n)` and the UNIQ_KEY
    `uniq_key_of(n)`, as in the single-record store."""
    await prepare_topic(target, TOPIC)
    async with AsyncProducer("bench_preload", namesrv_addr=target.namesrv_addr, send_timeout_ms=30_000) as producer:
        for sent in range(0, count, CHUNK):
            rows = min(CHUNK, count - sent)
            numbers = np.arange(sent, sent + rows)
            chunk = pa.table(
                {
                    "body": pa.array([BODY] * rows, pa.binary()),
                    "keys": pc.binary_join_element_wise("k", pc.cast(pa.array(numbers), pa.string()), ""),
                    "uniq_key": pa.array([uniq_key_of(int(n)) for n in numbers], pa.string()),
                }
            )
            await producer.send_arrow(chunk, TOPIC)
            if (sent + rows) % 500_000 == 0:
                progress(f"stored {sent + rows:,} messages")


@contextlib.asynccontextmanager
async def loaded_cluster(shape: str, count: int) -> AsyncIterator[Cluster]:
    """A name server and a broker holding `count` messages in `shape` ("arrow" or "single")."""
    if shape == "arrow":
        with cluster() as target:
            progress(f"storing {count:,} messages with keys in Arrow batches")
            await preload_arrow(target, count)
            yield target
        return
    with tempfile.TemporaryDirectory(prefix="rocketspark-bench-") as tmp:
        root = Path(tmp)
        progress(f"writing {count:,} messages with keys as single-message records")
        await write_single_records(root / "broker", count)
        quiet = ["--log-level", "WARNING"]
        with namesrv_process(root / "namesrv", *quiet) as namesrv:
            broker = broker_process(root / "broker", namesrv.address, *quiet)
            try:
                # a first start reads the whole log once: the transaction service (issue 28) looks for
                # commits without their end record when its progress file names no offset yet
                await asyncio.to_thread(broker.start, 3600.0)
                target = Cluster(namesrv, broker, root)
                await prepare_topic(target, TOPIC)
                yield target
            finally:
                broker.stop()


async def empty_restart_seconds() -> float:
    """A clean restart of a broker holding nothing but the topic."""
    with cluster() as target:
        await prepare_topic(target, TOPIC)
        return await restart_seconds(target, crash=False)


#: the pause before a resident size is read: what the broker holds, once its periodic work (flushes,
#: returning freed memory every TRIM_MEMORY_INTERVAL_S) has run, not what a burst of requests left for
#: a moment. At 2 s, 1M Arrow-sent messages measured 290 and 386 MiB in two runs, 262-264 at 12 s.
SETTLE_S = TRIM_MEMORY_INTERVAL_S + 2.0


async def measure(shape: str, count: int, seconds: float) -> list[Any]:
    async with loaded_cluster(shape, count) as target:
        stored = sum((await max_offsets(target)).values())
        await asyncio.sleep(SETTLE_S)
        after_writes, _ = resident_mib(target.broker.pid)
        lookup_p50, lookup_p99 = percentiles_ms(await lookups(target, stored), 50, 99)
        sample = min(STANDARD_SAMPLE, stored)
        received, elapsed, _ = await read_all(target, False, sample, max(seconds, 120.0))
        standard = received / elapsed
        received, elapsed, _ = await read_all(target, True, stored, max(seconds, 300.0))
        arrow = received / elapsed
        assert received == stored, f"the Arrow read got {received:,} of {stored:,} messages"
        await asyncio.sleep(SETTLE_S)
        after_read, peak = resident_mib(target.broker.pid)
        clean = await restart_seconds(target, crash=False)
        crashed = await restart_seconds(target, crash=True)
        progress(
            f"{stored:,} messages ({shape}): RSS {after_writes:.0f} / {after_read:.0f} MiB, "
            f"lookup p50 {lookup_p50} ms, "
            f"restart {clean:.1f} s / {crashed:.1f} s after SIGKILL, standard {standard:,.0f} msg/s, "
            f"Arrow {arrow:,.0f} msg/s"
        )
        return [
            shape,
            stored,
            round(after_writes),
            round(after_read),
            round(peak),
            lookup_p50,
            lookup_p99,
            round(clean, 1),
            round(crashed, 1),
            round(standard),
            round(arrow),
        ]


async def main(seconds: float, limit: int) -> None:
    empty = await empty_restart_seconds()
    progress(f"empty broker: restart {empty:.2f} s")
    rows: list[list[object]] = [["empty", 0, "", "", "", "", "", round(empty, 2), "", "", ""]]
    for shape in ("arrow", "single"):
        small = await measure(shape, limit // 10, seconds)
        large = await measure(shape, limit, seconds)
        ratios = [f"{shape} ratio", "", "", "", "", "", "", "", "", round(large[9] / small[9], 2)]
        rows += [small, large, [*ratios, round(large[10] / small[10], 2)]]
    record(
        "scale",
        [
            "shape",
            "messages",
            "RSS after writes MiB",
            "RSS after full read MiB",
            "peak RSS MiB",
            "lookup p50 ms",
            "lookup p99 ms",
            "restart to first send s",
            "restart after SIGKILL s",
            "standard msg/s",
            "Arrow msg/s",
        ],
        rows,
        {"queues": 8, "body_bytes": 128, "lookups": LOOKUPS, "standard_sample": STANDARD_SAMPLE},
    )
