"""`grpc`: the official 5.x Python client over the broker's gRPC endpoint against the 4.x path, in one run.

One broker serving both ports (grpcServerPort on), 128-byte bodies, topics of 8 queues:

1. sends: the 5.x `Producer.send` one at a time, and `send_async` with 16 in flight, against this
   project's 4.x `AsyncProducer` with 1 and 16 in flight (SEND_MESSAGE_V2 single sends);
2. consumption of what each side sent: the 5.x `SimpleConsumer` (`receive` of up to 32, then `ack` of
   each, one after another: 5.1.2's `ack_async` returns no future to wait for) against the 4.x
   `AsyncLitePullConsumer` (pulls of 32, offsets committed every 5 s).

"broker CPU µs/msg" is the broker process's CPU time over the row (the 5.x rows include the client's
start-up calls) per message: what the broker spends, apart from the clients' own costs.

The 5.x client runs in `.venv-rmq5` (made by `make .venv-rmq5/.installed`; bench/grpc_child.py); without
it the 5.x rows are skipped with a line saying so. Client and broker share the machine's cores.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.cluster import Cluster, cluster
from bench.ingest import BODY, QUEUES, drive, prepare_topic
from bench.report import percentiles_ms, progress, record
from bench.soak_report import cpu_seconds
from bench.spark_sink import stored
from rocketspark import AsyncLitePullConsumer, AsyncProducer, ConsumeFromWhere, Message

ROOT = Path(__file__).resolve().parents[1]
V5_PYTHON = ROOT / ".venv-rmq5" / "bin" / "python"
CHILD = Path(__file__).with_name("grpc_child.py")
IN_FLIGHT = (1, 16)
RECEIVE_BATCH = 32
INVISIBLE_S = 60
#: time a child gets beyond its measurement: interpreter and client start-up, shutdown
CHILD_OVERHEAD_S = 60.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def run_child(target: Cluster, command: str, args: dict[str, Any], seconds: float) -> dict[str, Any]:
    home = target.data_dir / "grpc-client"
    home.mkdir(exist_ok=True)
    process = await asyncio.create_subprocess_exec(
        str(V5_PYTHON),
        "-I",  # isolated: neither bench/ (whose modules would shadow the client's) nor PYTHON* variables
        str(CHILD),
        command,
        json.dumps(args),
        cwd=home,
        env=dict(os.environ, HOME=str(home)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), seconds + CHILD_OVERHEAD_S)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    if process.returncode or not stdout.strip():
        raise RuntimeError(f"the 5.x client's {command} failed ({process.returncode}): {stderr.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(stdout)
    return result


def _row(
    side: str, what: str, messages: int, seconds: float, latencies_s: list[float], broker_cpu_s: float
) -> list[Any]:
    rate = messages / seconds if seconds else 0.0
    p50, p99 = percentiles_ms(latencies_s, 50, 99)
    broker_us = broker_cpu_s / max(messages, 1) * 1e6
    progress(
        f"{side:4} {what:34} {messages:>8,} msgs in {seconds:5.1f} s: {rate:>7,.0f} msg/s, broker {broker_us:.0f} µs"
    )
    return [side, what, messages, round(seconds, 1), round(rate), p50, p99, round(broker_us)]


async def send_4x(target: Cluster, topic: str, in_flight: int, seconds: float, limit: int) -> list[Any]:
    cpu = cpu_seconds(target.broker.pid)
    async with AsyncProducer("bench_grpc_4x", namesrv_addr=target.namesrv_addr, send_timeout_ms=30_000) as producer:
        await producer.send(Message(topic, BODY))  # routes and connections ready
        tally, elapsed = await drive(in_flight, 1, seconds, limit, lambda: producer.send(Message(topic, BODY)))
    what = f"AsyncProducer.send, {in_flight} in flight"
    return _row("4.x", what, tally.messages, elapsed, tally.latencies_s, cpu_seconds(target.broker.pid) - cpu)


async def consume_4x(target: Cluster, topic: str, expected: int, seconds: float) -> list[Any]:
    cpu = cpu_seconds(target.broker.pid)
    consumer = AsyncLitePullConsumer(
        "bench_grpc_4x_reader",
        namesrv_addr=target.namesrv_addr,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        pull_batch_size=RECEIVE_BATCH,
    )
    received = 0
    latencies: list[float] = []
    async with consumer:
        consumer.subscribe(topic)
        started = time.perf_counter()
        deadline = started + seconds
        while received < expected and time.perf_counter() < deadline:
            begun = time.perf_counter()
            polled = await consumer.poll(1_000)
            if polled:
                latencies.append(time.perf_counter() - begun)
            received += len(polled)
        elapsed = time.perf_counter() - started
    what = f"LitePullConsumer.poll, pulls of {RECEIVE_BATCH}"
    return _row("4.x", what, received, elapsed, latencies, cpu_seconds(target.broker.pid) - cpu)


async def main(seconds: float, limit: int) -> None:
    if not V5_PYTHON.exists():
        print(f"  skipped: {V5_PYTHON} is missing (make .venv-rmq5/.installed)")
        return
    port = _free_port()
    rows = []
    with cluster(broker_settings=(f"grpcServerPort={port}",)) as target:
        endpoint = f"127.0.0.1:{port}"
        topic_5x, topic_4x = "BenchGrpc5", "BenchGrpc4"
        for topic in (topic_5x, topic_4x):
            await prepare_topic(target, topic)
        for in_flight in IN_FLIGHT:  # the two sides alternate: the machine's speed drifts
            args = {"endpoint": endpoint, "topic": topic_5x, "seconds": seconds, "limit": limit, "in_flight": in_flight}
            cpu = cpu_seconds(target.broker.pid)
            result = await run_child(target, "produce", args, seconds)
            used = cpu_seconds(target.broker.pid) - cpu
            what = "Producer.send" if in_flight == 1 else f"Producer.send_async, {in_flight} in flight"
            rows.append(_row("5.x", what, result["messages"], result["seconds"], result["latencies_s"], used))
            rows.append(await send_4x(target, topic_4x, in_flight, seconds, limit))
        sent_5x, sent_4x = await stored(target, topic_5x), await stored(target, topic_4x)
        args = {
            "endpoint": endpoint,
            "topic": topic_5x,
            "group": "bench_grpc_5x_reader",
            "seconds": max(seconds, 30.0),
            "limit": sent_5x,
            "batch": RECEIVE_BATCH,
            "invisible_s": INVISIBLE_S,
        }
        cpu = cpu_seconds(target.broker.pid)
        result = await run_child(target, "consume", args, args["seconds"])
        used = cpu_seconds(target.broker.pid) - cpu
        what = f"SimpleConsumer.receive({RECEIVE_BATCH}) + ack"
        rows.append(_row("5.x", what, result["messages"], result["seconds"], result["latencies_s"], used))
        rows.append(await consume_4x(target, topic_4x, sent_4x, max(seconds, 30.0)))
    record(
        "grpc",
        ["client", "what", "messages", "seconds", "msg/s", "p50 ms", "p99 ms", "broker CPU µs/msg"],
        rows,
        {
            "body_bytes": len(BODY),
            "queues": QUEUES,
            "v5_client": "rocketmq-python-client 5.1.2",
            "latency": "one send; one receive or poll that returned messages (5.x: with the acks of its batch)",
        },
    )
