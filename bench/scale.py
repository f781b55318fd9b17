"""`scale`: the broker's memory, key lookups, restart and consume rates as the store grows.

Two stores are measured in turn, one of a tenth of the messages and one of all of them (10M by
default), 128-byte bodies over 8 queues, each message with its own key, stored with Arrow sends
(not measured). For each: the broker's resident memory after the writes and after reading every
message back, QUERY_MESSAGE by key (random keys, each must be found), a clean restart and a
restart after SIGKILL (process start until it serves again), and the consume rates of the
`consume` scenario: standard records over the oldest messages, Arrow over all of them.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

from bench.cluster import Cluster, cluster
from bench.consume import TOPIC, key_of, max_offsets, preload, read_all
from bench.report import percentiles_ms, progress, record
from rocketspark.client.api import admin
from rocketspark.message.record_decoding import decode_records
from rocketspark.processes import wait_registered
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
    from the new process's start until it serves and is registered again."""
    if crash:
        target.broker.kill()
    else:
        target.broker.stop()
    started = time.perf_counter()
    await asyncio.to_thread(target.broker.start, 600.0)
    await asyncio.to_thread(wait_registered, target.namesrv_addr, target.broker.address, (TOPIC,), 60.0)
    return time.perf_counter() - started


#: the pause before a resident size is read: what the broker holds, once its periodic work (flushes,
#: returning freed memory) has run, not what a burst of requests left for a moment
SETTLE_S = 2.0


async def measure(count: int, seconds: float) -> list[object]:
    with cluster() as target:
        progress(f"storing {count:,} messages with keys")
        await preload(target, count, keys=True)
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
            f"{stored:,} messages: RSS {after_writes:.0f} / {after_read:.0f} MiB, lookup p50 {lookup_p50} ms, "
            f"restart {clean:.1f} s / {crashed:.1f} s after SIGKILL, standard {standard:,.0f} msg/s, "
            f"Arrow {arrow:,.0f} msg/s"
        )
        return [
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
    small = await measure(limit // 10, seconds)
    large = await measure(limit, seconds)
    ratios = ["ratio", "", "", "", "", "", "", "", round(large[8] / small[8], 2), round(large[9] / small[9], 2)]
    record(
        "scale",
        [
            "messages",
            "RSS after writes MiB",
            "RSS after full read MiB",
            "peak RSS MiB",
            "lookup p50 ms",
            "lookup p99 ms",
            "restart s",
            "restart after SIGKILL s",
            "standard msg/s",
            "Arrow msg/s",
        ],
        [small, large, ratios],
        {"queues": 8, "body_bytes": 128, "lookups": LOOKUPS, "standard_sample": STANDARD_SAMPLE},
    )
