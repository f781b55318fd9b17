"""`ingest`: how fast the broker takes messages in, and how long each acknowledgement takes.

Three ways of sending 128-byte messages, each with ASYNC_FLUSH and SYNC_FLUSH:
(a) single SEND_MESSAGE_V2 sends, 64 in flight (RocketMQ's `producer.sh -w 64`);
(b) standard batches of 16, 64 in flight (`batchproducer.sh`);
(c) Arrow batches of 10,000, 2 in flight.
Only acknowledged messages count, and the count is checked against the queues' max offsets. Each
mode runs with ASYNC_FLUSH with the duplicate window (`duplicateWindowSeconds`) on and off in turn,
WINDOW_PAIRS times, then with SYNC_FLUSH; the window's cost is the ratio of the medians.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pyarrow as pa

from bench.cluster import Cluster, cluster
from bench.report import percentiles_ms, progress, record
from rocketspark import AsyncProducer, Message
from rocketspark.client.api import admin, offset
from rocketspark.processes import wait_registered
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient

TOPIC = "BenchIngest"
QUEUES = 8
BODY = b"x" * 128


@dataclass
class Tally:
    messages: int = 0
    latencies_s: list[float] = field(default_factory=list)


async def prepare_topic(target: Cluster, topic: str = TOPIC) -> None:
    remoting = RemotingClient()
    try:
        await admin.create_topic(remoting, target.broker.address, TopicConfig(topic, QUEUES, QUEUES))
    finally:
        await remoting.close()
    await asyncio.to_thread(wait_registered, target.namesrv_addr, target.broker.address, (topic,))


async def stored_messages(target: Cluster) -> int:
    remoting = RemotingClient()
    try:
        return sum([await offset.get_max_offset(remoting, target.broker.address, TOPIC, q) for q in range(QUEUES)])
    finally:
        await remoting.close()


async def drive(
    in_flight: int, per_call: int, seconds: float, limit: int, call: Callable[[], Awaitable[object]]
) -> tuple[Tally, float]:
    """Run `call` from `in_flight` workers until `seconds` pass or `limit` messages are sent (never more)."""
    tally = Tally()
    deadline = time.perf_counter() + seconds
    claimed = 0  # messages of the calls started, acknowledged or not

    async def worker() -> None:
        nonlocal claimed
        while time.perf_counter() < deadline and claimed + per_call <= limit:
            claimed += per_call
            started = time.perf_counter()
            await call()
            tally.latencies_s.append(time.perf_counter() - started)
            tally.messages += per_call

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return tally, time.perf_counter() - started


async def run_mode(mode: str, flush: str, seconds: float, limit: int, window_s: int = 600) -> list[object]:
    """One measurement; `window_s` is the broker's duplicateWindowSeconds (600 by default, 0 = off)."""
    with cluster(flush=flush, broker_settings=(f"duplicateWindowSeconds={window_s}",)) as target:
        await prepare_topic(target)
        async with AsyncProducer(f"bench_{mode}", namesrv_addr=target.namesrv_addr, send_timeout_ms=30_000) as producer:
            await producer.send(Message(TOPIC, BODY))  # routes and connections ready
            if mode == "single":
                call = lambda: producer.send(Message(TOPIC, BODY))  # noqa: E731
                tally, elapsed = await drive(64, 1, seconds, limit, call)
            elif mode == "batch16":
                batch = [Message(TOPIC, BODY) for _ in range(16)]
                tally, elapsed = await drive(64, 16, seconds, limit, lambda: producer.send_batch(batch))
            else:
                table = pa.table({"body": pa.array([BODY] * 10_000, pa.binary())})
                tally, elapsed = await drive(2, 10_000, seconds, limit, lambda: producer.send_arrow(table, TOPIC))
        stored = await stored_messages(target) - 1  # the warm-up message
        if stored != tally.messages:
            raise RuntimeError(f"{mode}/{flush}: {tally.messages} acknowledged but {stored} stored")
        disk = target.commit_log_bytes() / max(stored, 1)
    rate = tally.messages / elapsed
    p50, p99 = percentiles_ms(tally.latencies_s, 50, 99)
    window = f"{window_s} s" if window_s else "off"
    progress(
        f"{mode:8} {flush:5} window {window:5} {tally.messages:>9,} msgs in {elapsed:5.1f} s: {rate:>11,.0f} msg/s"
    )
    return [
        mode,
        flush.upper() + "_FLUSH",
        window,
        tally.messages,
        round(elapsed, 1),
        round(rate),
        round(rate * len(BODY) / 1e6, 1),
        p50,
        p99,
        round(disk),
    ]


#: runs with the duplicate window on and off, alternating, per mode (the machine's speed drifts:
#: pairs side by side, and the median of each side, make the ratio steadier than one run each)
WINDOW_PAIRS = 3


async def main(seconds: float, limit: int) -> None:
    rows = []
    costs = []
    for mode in ("single", "batch16", "arrow10k"):
        rates: dict[str, list[float]] = {"on": [], "off": []}
        for _ in range(WINDOW_PAIRS):
            for side, window_s in (("on", 600), ("off", 0)):
                row = await run_mode(mode, "async", seconds, limit, window_s=window_s)
                rows.append(row)
                rates[side].append(float(row[5]))  # type: ignore[arg-type]
        rows.append(await run_mode(mode, "sync", seconds, limit))
        on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
        costs.append([mode, round(on), round(off), round(on / off, 2)])
    record(
        "ingest",
        ["mode", "flush", "dup window", "messages", "seconds", "msg/s", "MB/s", "p50 ms", "p99 ms", "disk B/msg"],
        rows,
        {"body_bytes": len(BODY), "queues": QUEUES, "in_flight": {"single": 64, "batch16": 64, "arrow10k": 2}},
    )
    record(
        "ingest-window",
        ["mode", "window 600 s msg/s", "window off msg/s", "on / off"],
        costs,
        {"pairs": WINDOW_PAIRS, "flush": "ASYNC_FLUSH", "statistic": "median of each side"},
    )
