"""`latency`: single sends from 1,000 to 10,000 msg/s: acknowledgement, and send to receipt by a consumer.

Producer and consumer (a lite-pull consumer polling, or a push consumer whose listener records the
receipt on its consume thread) run in one process (one clock); each message carries its send
time. Each broker is fresh, so whatever a broker does once after its start is measured (issue 24).
Two shapes of sending:

- overlapping: sends start on a fixed schedule, each as its own task on one producer (up to
  IN_FLIGHT at once), so a slow answer does not delay the next send;
- one after another: each send is awaited before the next starts (at most the target rate).

The rate actually reached is recorded next to the target, and so is the CPU the broker and this
process used while sending (in cores: CPU seconds per second), which shows where the two cores run
out. Overlapping sends with the lite-pull consumer run at KNEE_RATES, the other shapes at RATES. The
consumer starts at the queues' ends and receives through held pulls.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time

from bench.cluster import cluster
from bench.ingest import QUEUES, prepare_topic
from bench.report import percentiles_ms, progress, record
from bench.soak_report import cpu_seconds
from rocketspark import (
    AsyncLitePullConsumer,
    AsyncProducer,
    AsyncPushConsumer,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
)
from rocketspark.aio import wait_until

TOPIC = "BenchIngest"
RATES = (1_000, 10_000)
#: rates of the overlapping lite-pull shape: around where one client process and the broker use a core each
KNEE_RATES = (1_000, 2_000, 3_000, 4_000, 10_000)
IN_FLIGHT = 256


async def _assigned(consumer: AsyncLitePullConsumer | AsyncPushConsumer) -> None:
    while len(consumer.assignment()) < QUEUES:  # noqa: ASYNC110 - the assignment has no event to await
        await asyncio.sleep(0.05)


def _latency(message: MessageExt) -> float:
    sent: float = struct.unpack(">d", message.body[:8])[0]
    return time.perf_counter() - sent


class _PushReceiver:
    """The push consumer's listener: records latencies on the consume threads, wakes the loop when done."""

    def __init__(self, count: int, latencies: list[float]) -> None:
        self.count = count
        self.latencies = latencies
        self.lock = threading.Lock()
        self.loop = asyncio.get_running_loop()
        self.done = self.loop.create_future()

    def __call__(self, messages: list[MessageExt]) -> ConsumeStatus:
        with self.lock:
            self.latencies.extend(_latency(m) for m in messages)
            if len(self.latencies) >= self.count:
                self.loop.call_soon_threadsafe(self._finish)
        return ConsumeStatus.CONSUME_SUCCESS

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def measure(rate: int, seconds: float, limit: int, push: bool, overlapping: bool) -> list[object]:
    count = int(min(limit, seconds * rate))
    latencies: list[float] = []
    acks: list[float] = []
    with cluster() as target:
        await prepare_topic(target)
        consumer: AsyncLitePullConsumer | AsyncPushConsumer
        if push:
            listener = _PushReceiver(count, latencies)
            consumer = AsyncPushConsumer(
                "bench_latency",
                namesrv_addr=target.namesrv_addr,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            )
            consumer.register_listener(listener)
        else:
            consumer = AsyncLitePullConsumer(
                "bench_latency",
                namesrv_addr=target.namesrv_addr,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                auto_commit=False,
            )
        async with AsyncProducer("bench_latency", namesrv_addr=target.namesrv_addr) as producer:
            consumer.subscribe(TOPIC)
            async with consumer:
                await wait_until(asyncio.ensure_future(_assigned(consumer)), 30)
                await asyncio.sleep(1.0)  # every queue's first long poll is held by now

                async def receive() -> None:
                    if isinstance(consumer, AsyncPushConsumer):
                        await listener.done
                        return
                    while len(latencies) < count:
                        latencies.extend(_latency(m) for m in await consumer.poll(1_000) if isinstance(m, MessageExt))

                slots = asyncio.Semaphore(IN_FLIGHT)

                async def send_one() -> None:
                    sent = time.perf_counter()
                    await producer.send(Message(TOPIC, struct.pack(">d", sent) + b"x" * 120))
                    acks.append(time.perf_counter() - sent)

                async def send_one_in_slot() -> None:
                    try:
                        await send_one()
                    finally:
                        slots.release()

                receiver = asyncio.ensure_future(receive())
                sends = []
                started = time.perf_counter()
                cpu_before = cpu_seconds(target.broker.pid), time.process_time()
                for i in range(count):
                    await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
                    if overlapping:
                        await slots.acquire()
                        sends.append(asyncio.ensure_future(send_one_in_slot()))
                    else:
                        await send_one()
                await asyncio.gather(*sends)
                elapsed = time.perf_counter() - started
                cores = (
                    (cpu_seconds(target.broker.pid) - cpu_before[0]) / elapsed,
                    (time.process_time() - cpu_before[1]) / elapsed,
                )
                await asyncio.wait_for(receiver, 30)
    shape = "overlapping" if overlapping else "one after another"
    kind = "push (concurrent listener)" if push else "lite-pull (long polling)"
    return _row(shape, kind, rate, count / elapsed, acks, latencies, cores)


def _row(
    shape: str,
    kind: str,
    rate: int,
    sent_rate: float,
    acks: list[float],
    latencies: list[float],
    cores: tuple[float, float],
) -> list[object]:
    """One measurement's row, announced as a progress line."""
    ack = percentiles_ms(acks, 50, 99, 99.9, 100)
    receipt = percentiles_ms(latencies, 50, 99, 99.9, 100)
    progress(
        f"{shape}, {kind}, {rate:,} msg/s ({sent_rate:,.0f} reached), {len(latencies):,} messages: "
        f"ack p99 {ack[1]} ms max {ack[3]} ms, receipt p99 {receipt[1]} ms max {receipt[3]} ms; "
        f"cores used: broker {cores[0]:.2f}, this process {cores[1]:.2f}"
    )
    return [shape, kind, len(latencies), rate, round(sent_rate), *ack, *receipt, *(round(c, 2) for c in cores)]


async def main(seconds: float, limit: int) -> None:
    runs = [(False, True, KNEE_RATES), (False, False, RATES), (True, True, RATES)]  # (push, overlapping, rates)
    rows = [
        await measure(rate, seconds, limit, push, overlapping) for push, overlapping, rates in runs for rate in rates
    ]
    record(
        "latency",
        [
            "sends",
            "consumer",
            "messages",
            "target msg/s",
            "sent msg/s",
            "ack p50 ms",
            "ack p99 ms",
            "ack p99.9 ms",
            "ack max ms",
            "receipt p50 ms",
            "receipt p99 ms",
            "receipt p99.9 ms",
            "receipt max ms",
            "broker cores",
            "bench cores",
        ],
        rows,
        {"body_bytes": 128, "queues": QUEUES, "sends_in_flight_at_most": IN_FLIGHT, "fresh_broker_per_row": True},
    )
