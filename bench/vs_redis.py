"""`vs-redis`: the bundled broker against Redis Streams, one request in flight, thin clients, one run.

What a RocketMQ application does, measured beside what the same pattern costs with Redis Streams 7
(redis-py, no persistence) on the same machine:

1. batches of 16: SEND_BATCH_MESSAGE against a pipeline of 16 XADDs;
2. pull 32 over that data: PULL_MESSAGE (32 records, decoded) against XREAD COUNT 32;
3. single sends: SEND_MESSAGE_V2 against XADD;
4. pull 32 over the single-sent data;
5. (no Redis side) pull latency of 32 and of 1,024 messages over single-sent data;
6. the floor of a request: an empty request on the same connection, answered at once (a request
   code no processor serves: the broker's connection answers REQUEST_CODE_NOT_SUPPORTED without
   a task), against Redis's PING. No send or pull can be faster than this one request path.

The thin RocketMQ client is the project's remoting client and wire codecs, without producer or
consumer logic; every message carries a UNIQ_KEY as real clients send it, and the broker runs with
its defaults (duplicate window on). Redis is started by the scenario on a free loopback port when
`redis-server` is on the PATH; otherwise its side is skipped with a line saying so.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from bench.cluster import Cluster, cluster
from bench.report import percentiles_ms, progress, record
from rocketspark.client.api import admin, pull, send
from rocketspark.message.ids import UniqueIdGenerator
from rocketspark.message.properties import codec as props
from rocketspark.message.records.batch_body import BatchColumns, encode_batch_body
from rocketspark.message.records.decoding import decode_records
from rocketspark.processes import wait_registered
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.send import SendMessageRequestHeader
from rocketspark.remoting.client import RemotingClient

BODY = b"x" * 128
GROUP = "bench_vs_redis"
BROKER_NAME = "broker-a"  # the bundled broker's default name
BATCH = 16
PULL = 32
LATENCY_PULLS = 200
#: a request code no processor of the broker serves: answered on the spot, with no work behind it
EMPTY_REQUEST_CODE = 9_999


class Measured:
    """Messages moved in a time-bounded loop and the latency of each request."""

    def __init__(self) -> None:
        self.messages = 0
        self.latencies_s: list[float] = []
        self.elapsed = 0.0

    @property
    def rate(self) -> float:
        return self.messages / self.elapsed if self.elapsed else 0.0


async def timed(seconds: float, limit: int, step: Callable[[], Awaitable[int]]) -> Measured:
    """Call `step` (which returns messages moved, 0 when done) one at a time until time or `limit`."""
    measured = Measured()
    started = time.perf_counter()
    deadline = started + seconds
    while measured.messages < limit and time.perf_counter() < deadline:
        before = time.perf_counter()
        moved = await step()
        if not moved:
            break
        measured.latencies_s.append(time.perf_counter() - before)
        measured.messages += moved
    measured.elapsed = time.perf_counter() - started
    return measured


class ThinRocketMQ:
    """Standard requests of one producer and one consumer, straight over the remoting client."""

    def __init__(self, target: Cluster) -> None:
        self.address = target.broker.address
        self.client = RemotingClient()
        self.ids = UniqueIdGenerator()
        self.topic = ""  # use_topic sets it

    def _header(self, topic: str, *, properties: str, batch: bool = False) -> SendMessageRequestHeader:
        return SendMessageRequestHeader(
            producer_group="bench_vs_redis_producer",
            topic=topic,
            default_topic="TBW102",
            default_topic_queue_nums=4,
            queue_id=0,
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            flag=0,
            properties=properties,
            batch=batch,
        )

    async def send_one(self) -> int:
        key = self.ids.next()
        header = self._header(self.topic, properties=props.encode_properties({props.UNIQ_KEY: key}))
        await send.send_message(self.client, self.address, BROKER_NAME, header, BODY, msg_id=key)
        return 1

    async def send_batch(self) -> int:
        keys = [self.ids.next() for _ in range(BATCH)]
        body = encode_batch_body(
            BatchColumns.of([(0, BODY, props.encode_properties({props.UNIQ_KEY: k})) for k in keys])
        )
        header = self._header(self.topic, properties="", batch=True)
        code = RequestCode.SEND_BATCH_MESSAGE
        await send.send_message(self.client, self.address, BROKER_NAME, header, body, msg_id="", code=code, count=BATCH)
        return BATCH

    async def pull(self, offset: int, count: int) -> tuple[int, int]:
        """(messages decoded, next offset) of one pull from `offset` on queue 0."""
        result = await pull.read_pull(self.client, self.address, GROUP, self.topic, 0, offset, count)
        return len(decode_records(result.body)), result.next_begin_offset

    async def empty_request(self) -> int:
        response = await self.client.invoke(self.address, RemotingCommand.request(EMPTY_REQUEST_CODE))
        if response.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            raise RuntimeError(f"the empty request was answered {response.code}, not REQUEST_CODE_NOT_SUPPORTED")
        return 1

    async def use_topic(self, topic: str, target: Cluster) -> None:
        await admin.create_topic(self.client, self.address, TopicConfig(topic, 1, 1))
        await asyncio.to_thread(wait_registered, target.namesrv_addr, self.address, (topic,))
        self.topic = topic


@contextmanager
def redis_server() -> Iterator[Any | None]:
    """A redis-py client of a fresh, unpersisted Redis on a free loopback port; None without Redis."""
    binary = shutil.which("redis-server")
    try:
        import redis  # noqa: PLC0415 (only this scenario needs it)
    except ImportError:
        redis = None
    if binary is None or redis is None:
        missing = "redis-server is not on the PATH" if binary is None else "the redis package is not installed"
        print(f"  .. Redis side skipped: {missing} (apt-get install redis-server; pip install redis)")
        yield None
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="rocketspark-bench-redis-") as tmp:
        command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        process = subprocess.Popen([*command, "--dir", tmp], stdout=subprocess.DEVNULL)
        try:
            client = redis.Redis(host="127.0.0.1", port=port)
            deadline = time.monotonic() + 10
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            yield client
        finally:
            process.terminate()
            process.wait(10)


class RedisStreams:
    """The same patterns with XADD, a pipeline of XADDs, and XREAD COUNT."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.stream = ""

    def use_stream(self, stream: str) -> None:
        self.stream = stream

    async def empty_request(self) -> int:
        self.client.ping()
        return 1

    async def send_one(self) -> int:
        self.client.xadd(self.stream, {"body": BODY})
        return 1

    async def send_batch(self) -> int:
        pipeline = self.client.pipeline(transaction=False)
        for _ in range(BATCH):
            pipeline.xadd(self.stream, {"body": BODY})
        pipeline.execute()
        return BATCH

    async def pull(self, last_id: bytes, count: int) -> tuple[int, bytes]:
        answer = self.client.xread({self.stream: last_id}, count=count)
        if not answer:
            return 0, last_id
        entries = answer[0][1]
        return len(entries), entries[-1][0]


async def read_all(seconds: float, limit: int, pull_step: Callable[[Any], Awaitable[tuple[int, Any]]]) -> Measured:
    position: list[Any] = [None]

    async def step() -> int:
        moved, position[0] = await pull_step(position[0])
        return moved

    return await timed(seconds, limit, step)


async def main(seconds: float, limit: int) -> None:
    rows: list[list[Any]] = []
    latency_rows: list[list[Any]] = []
    with cluster() as target, redis_server() as redis_client:
        ours = ThinRocketMQ(target)
        theirs = RedisStreams(redis_client) if redis_client is not None else None
        try:
            await ours.empty_request()  # the connection, opened before the measurement
            floor = await timed(seconds, limit, ours.empty_request)
            other_floor = await timed(seconds, limit, theirs.empty_request) if theirs is not None else None
            rows.append(_row("empty request (floor) / PING", floor, other_floor))
            progress(
                f"empty request: {floor.rate:,.0f}/s" + (f" vs PING {other_floor.rate:,.0f}" if other_floor else "")
            )
            for name, kind in (("batches of 16", "batch"), ("single sends", "single")):
                topic = f"BenchVsRedis_{kind}"
                await ours.use_topic(topic, target)
                sent = await timed(seconds, limit, ours.send_batch if kind == "batch" else ours.send_one)
                read = await read_all(seconds, sent.messages, lambda offset: ours.pull(offset or 0, PULL))
                other_sent = other_read = None
                if theirs is not None:
                    theirs.use_stream(topic)
                    other_sent = await timed(seconds, limit, theirs.send_batch if kind == "batch" else theirs.send_one)
                    other_read = await read_all(
                        seconds, other_sent.messages, lambda last: theirs.pull(last or b"0-0", PULL)
                    )
                for what, mine, other in ((name, sent, other_sent), (f"pull 32 over {name}", read, other_read)):
                    rows.append(_row(what, mine, other))
                    progress(f"{what}: {mine.rate:,.0f} msg/s" + (f" vs Redis {other.rate:,.0f}" if other else ""))
                if kind == "single":
                    for count in (PULL, 1024):
                        latencies = await _pull_latencies(ours, count, sent.messages)
                        p50, p90, p99 = percentiles_ms(latencies, 50, 90, 99)
                        latency_rows.append([f"pull {count} over single sends", len(latencies), p50, p90, p99])
        finally:
            await ours.client.close()
    record(
        "vs-redis",
        ["pattern (one request in flight)", "bundled broker msg/s", "Redis Streams msg/s", "ratio", "p50 ms", "p99 ms"],
        rows,
        {"body_bytes": len(BODY), "batch": BATCH, "pull": PULL, "broker": "defaults, duplicate window on"},
    )
    record(
        "vs-redis-pull-latency",
        ["pull (standard, decoded)", "pulls", "p50 ms", "p90 ms", "p99 ms"],
        latency_rows,
        {"stored_by": "single SEND_MESSAGE_V2 requests, one in flight"},
    )


async def _pull_latencies(ours: ThinRocketMQ, count: int, stored: int) -> list[float]:
    """Latencies of pulls of `count` messages from offsets spread over the stored ones."""
    latencies: list[float] = []
    for i in range(LATENCY_PULLS):
        offset = (i * 7919 * count) % max(1, stored - count)
        started = time.perf_counter()
        moved, _ = await ours.pull(offset, count)
        latencies.append(time.perf_counter() - started)
        if moved != min(count, stored - offset):
            raise RuntimeError(f"a pull of {count} from {offset} returned {moved} messages")
    return latencies


def _row(what: str, mine: Measured, other: Measured | None) -> list[Any]:
    p50, p99 = percentiles_ms(mine.latencies_s, 50, 99)
    if other is None:
        return [what, round(mine.rate), "skipped", "", p50, p99]
    return [what, round(mine.rate), round(other.rate), round(mine.rate / other.rate, 2), p50, p99]
