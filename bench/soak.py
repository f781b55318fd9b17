"""`soak`: a broker under every kind of traffic for a configured time, its resources sampled per interval.

For `--seconds` (1,800 on record; samples every minute, or every tenth of a shorter run):

- three producers send to one topic, each message with an id of its own: single sends one after
  another, batches of BATCH_ROWS, Arrow sends of ARROW_ROWS;
- a lite-pull consumer, a push consumer and a Spark stream (into Parquet) read it from its start;
- retention deletes old segments (small segments, a short reserved time, any hour), and every other
  bound of the store is reached within the run too: consume queue files of `queue_file_entries` entries,
  a duplicate window of `window_s` seconds (its key bound twice the keys that arrive in that time),
  a batch cache of `batch_cache_bytes` and a consume queue block cache of `queue_cache_bytes`;
- a topic is created (by a first send) and deleted every third of an interval;
- the broker is restarted (SIGTERM, then again on its port with its data) halfway.

Each interval records the broker's RSS (and its anonymous part: heap, not file pages), open file
descriptors, threads and disk use, the single sends' acknowledgement p99 and each reader's lag. At
the end the producers stop, the readers catch up, and every acknowledged message is looked for in
what each reader read: lost ones, duplicates (at-least-once allows them in the lite-pull and push
consumers, not in the Parquet output); and the slopes of RSS and disk after the restarted broker's
warm-up (`SoakPlan.warm_up_s`). The series are plotted under bench/results/.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from bench.cluster import Cluster, cluster
from bench.report import RESULTS_DIR, percentiles_ms, progress, record
from bench.soak_report import (
    SAMPLE_COLUMNS,
    ProcessUse,
    ReaderCheck,
    Sample,
    disk_by_directory_mib,
    disk_used_mib,
    plot,
    summary,
)
from rocketspark import (
    AsyncLitePullConsumer,
    AsyncProducer,
    AsyncPushConsumer,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
)
from rocketspark.client.api import admin
from rocketspark.errors import RocketMQError
from rocketspark.processes import wait_registered
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient
from rocketspark.spark.session import local_session

TOPIC = "SoakTopic"
QUEUES = 4
BATCH_ROWS = 16
ARROW_ROWS = 200
ID_BYTES = 12  # a message's id: its producer's letter, "-", a 10-digit sequence number
BODY_BYTES = 100
SEND_ERRORS = (RocketMQError, OSError, TimeoutError)
CATCH_UP_S = 120.0
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


@dataclass(frozen=True)
class SoakPlan:
    seconds: float
    interval_s: float
    singles_per_s: float = 50.0
    batches_per_s: float = 5.0
    arrow_sends_per_s: float = 1.0
    segment_bytes: int = 1024 * 1024
    retention_s: float = 120.0
    window_s: int = 60
    queue_file_entries: int = 6_000
    batch_cache_bytes: int = 8 * 1024 * 1024
    # readers a little behind the tail read each new consume queue block back once: about 0.6 MiB a
    # minute here, so the default 8 MiB takes a quarter of an hour to fill
    queue_cache_bytes: int = 1024 * 1024

    @property
    def warm_up_s(self) -> float:
        """After a start, until the caches have filled (the batch cache takes about two minutes here)."""
        return min(180.0, self.seconds / 4)

    @property
    def keys_per_s(self) -> float:
        return self.singles_per_s + self.batches_per_s * BATCH_ROWS + self.arrow_sends_per_s * ARROW_ROWS

    @classmethod
    def for_seconds(cls, seconds: float, **changes: Any) -> SoakPlan:
        interval = 60.0 if seconds >= 600 else max(5.0, seconds / 10)
        return dataclasses.replace(cls(seconds, interval), **changes)

    def broker_settings(self) -> tuple[str, ...]:
        return (
            f"mappedFileSizeCommitLog={self.segment_bytes}",
            f"fileReservedTime={self.retention_s / 3600}",
            "deleteWhen=*",
            "cleanResourceInterval=1000",
            f"mappedFileSizeConsumeQueue={self.queue_file_entries * 20}",
            f"duplicateWindowSeconds={self.window_s}",
            f"batchCacheBytes={self.batch_cache_bytes}",
            f"consumeQueueCacheBytes={self.queue_cache_bytes}",
            f"duplicateWindowMaxKeys={round(2 * self.keys_per_s * self.window_s)}",
        )


def message_id(kind: str, number: int) -> bytes:
    return f"{kind}-{number:010d}".encode()


class Ledger:
    """What was acknowledged and what each reader read (push listeners write from their threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acknowledged: set[bytes] = set()
        self.failed_sends = 0
        self.single_acks_s: list[float] = []
        self.reads: dict[str, Counter[bytes]] = {"lite-pull": Counter(), "push": Counter()}
        self.spark_batches: dict[int, int] = {}  # batch id -> rows

    def read(self, reader: str, bodies: list[bytes]) -> None:
        with self.lock:
            self.reads[reader].update(body[:ID_BYTES] for body in bodies)

    def lag(self, reader: str) -> int:
        with self.lock:
            return len(self.acknowledged - self.reads[reader].keys())

    def spark_lag(self) -> int:
        return max(0, len(self.acknowledged) - sum(self.spark_batches.values()))

    def take_single_acks(self) -> list[float]:
        with self.lock:
            taken, self.single_acks_s = self.single_acks_s, []
        return taken


async def produce(
    kind: str,
    rows: int,
    per_s: float,
    send: Callable[[list[bytes]], Awaitable[object]],
    ledger: Ledger,
    stop: asyncio.Event,
) -> None:
    """Send `rows` new ids per send, `per_s` sends a second (no catching up after an outage)."""
    number = 0
    next_at = time.perf_counter()
    while not stop.is_set():
        next_at = max(next_at + 1 / per_s, time.perf_counter() - 1.0)
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
        ids = [message_id(kind, number + i) for i in range(rows)]
        number += rows
        started = time.perf_counter()
        try:
            await asyncio.wait_for(send([i.ljust(BODY_BYTES, b".") for i in ids]), 30)
        except SEND_ERRORS:
            ledger.failed_sends += rows
            continue
        with ledger.lock:
            ledger.acknowledged.update(ids)
            if kind == "s":
                ledger.single_acks_s.append(time.perf_counter() - started)


async def lite_pull(target: Cluster, ledger: Ledger, stop: asyncio.Event) -> None:
    consumer = AsyncLitePullConsumer(
        "soak_lite_pull",
        namesrv_addr=target.namesrv_addr,
        consume_from_where=FIRST,
    )
    consumer.subscribe(TOPIC)
    async with consumer:
        while not stop.is_set():
            ledger.read("lite-pull", [m.body for m in await consumer.poll(500) if isinstance(m, MessageExt)])


def push_consumer(target: Cluster, ledger: Ledger) -> AsyncPushConsumer:
    def listener(messages: list[MessageExt]) -> ConsumeStatus:
        ledger.read("push", [m.body for m in messages])
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = AsyncPushConsumer("soak_push", namesrv_addr=target.namesrv_addr, consume_from_where=FIRST)
    consumer.subscribe(TOPIC)
    consumer.register_listener(listener)
    return consumer


def start_spark_stream(spark: SparkSession, target: Cluster, output: Path) -> StreamingQuery:
    frame = (
        spark.readStream.format("rocketmq")
        .option("nameserver", target.namesrv_addr)
        .option("topic", TOPIC)
        .option("consumerGroup", "soak_spark")
        .option("startingOffsets", "earliest")
        .load()
        .select("body")
    )
    writer = frame.writeStream.format("parquet").option("checkpointLocation", str(output.with_suffix(".checkpoint")))
    return writer.trigger(processingTime="1 second").start(str(output))


def note_spark_progress(query: StreamingQuery, ledger: Ledger) -> None:
    for progress_event in query.recentProgress:
        ledger.spark_batches[int(progress_event["batchId"])] = int(progress_event["numInputRows"])


async def churn_topics(target: Cluster, producer: AsyncProducer, stop: asyncio.Event, every_s: float) -> int:
    """A topic created by a first send and deleted again, every `every_s`; returns how many."""
    remoting = RemotingClient()
    done = 0
    try:
        while not stop.is_set():
            await asyncio.sleep(every_s)
            topic = f"SoakChurn{done}"
            try:
                await asyncio.wait_for(producer.send(Message(topic, b"churn")), 30)
                await admin.delete_topic_in_broker(remoting, target.broker.address, topic, 10)
                await admin.delete_topic_in_namesrv(remoting, target.namesrv_addr, topic, 10)
                done += 1
            except SEND_ERRORS as exc:  # the broker is restarting
                progress(f"topic churn skipped a round: {exc}")
    finally:
        await remoting.close()
    return done


async def restart_broker(target: Cluster) -> None:
    """SIGTERM, then the broker again on its port with its data."""
    broker = target.broker
    port = broker.address.rsplit(":", 1)[1]
    await asyncio.to_thread(broker.stop)
    broker.args[broker.args.index("--port") + 1] = port
    await asyncio.to_thread(broker.start)
    await asyncio.to_thread(wait_registered, target.namesrv_addr, broker.address)


def segments(target: Cluster) -> set[str]:
    return {p.name for p in (target.data_dir / "broker" / "commitlog").iterdir()}


async def take_sample(target: Cluster, ledger: Ledger, at_s: float, life: int) -> Sample:
    use = ProcessUse.of(target.broker.pid)
    memory = await broker_memory_mib(target)
    acks = ledger.take_single_acks()
    return Sample(
        round(at_s, 1),
        life,
        round(use.rss_mib, 1),
        round(use.anon_mib, 1),
        *(memory.get(key, float("nan")) for key in ("memoryHeapInUseBytes", "memoryHeapFreeBytes", "memoryArrowBytes")),
        use.open_fds,
        use.threads,
        round(disk_used_mib(target.data_dir / "broker"), 2),
        len(acks),
        percentiles_ms(acks, 99)[0],
        ledger.lag("lite-pull"),
        ledger.lag("push"),
        ledger.spark_lag(),
    )


async def broker_memory_mib(target: Cluster) -> dict[str, float]:
    """The broker's `memory*` figures of GET_BROKER_RUNTIME_INFO, in MiB (see `broker.memory`)."""
    remoting = RemotingClient()
    try:
        table = await admin.get_runtime_info(remoting, target.broker.address, timeout_s=10)
    finally:
        await remoting.close()
    return {key: round(int(value) / 2**20, 1) for key, value in table.items() if key.endswith("Bytes")}


async def caught_up(ledger: Ledger, query: StreamingQuery, spark: SparkSession, output: Path) -> None:
    """Until every reader read every acknowledged message. Spark's lag counts rows, and rows of sends
    that failed after storing (a timeout across the restart) can make up for a batch still being
    written: once the counts agree, the Parquet output's ids are checked too."""
    while True:
        await asyncio.to_thread(note_spark_progress, query, ledger)
        if not (ledger.lag("lite-pull") or ledger.lag("push") or ledger.spark_lag()):
            written = await asyncio.to_thread(parquet_reads, spark, output)
            if not ledger.acknowledged - written.keys():
                return
        await asyncio.sleep(0.5)


def parquet_reads(spark: SparkSession, output: Path) -> Counter[bytes]:
    bodies = spark.read.parquet(str(output)).toArrow().column("body").to_pylist()
    return Counter(bytes(b)[:ID_BYTES] for b in bodies)


async def create_topic(target: Cluster) -> None:
    remoting = RemotingClient()
    try:
        await admin.create_topic(remoting, target.broker.address, TopicConfig(TOPIC, QUEUES, QUEUES))
    finally:
        await remoting.close()


async def run(plan: SoakPlan, spark: SparkSession, work_dir: Path) -> dict[str, Any]:
    """One soak; returns its samples, end summary and restart time."""
    ledger = Ledger()
    samples: list[Sample] = []
    seen_segments: set[str] = set()
    with cluster(broker_settings=plan.broker_settings()) as target:
        await create_topic(target)
        stop_sending, stop_reading = asyncio.Event(), asyncio.Event()
        query = await asyncio.to_thread(start_spark_stream, spark, target, work_dir / "soak.parquet")
        push = push_consumer(target, ledger)
        await push.start()
        producer = AsyncProducer("soak_producer", namesrv_addr=target.namesrv_addr)
        await producer.start()
        tasks = [
            asyncio.ensure_future(lite_pull(target, ledger, stop_reading)),
            asyncio.ensure_future(
                produce("s", 1, plan.singles_per_s, lambda b: producer.send(Message(TOPIC, b[0])), ledger, stop_sending)
            ),
            asyncio.ensure_future(
                produce(
                    "b",
                    BATCH_ROWS,
                    plan.batches_per_s,
                    lambda b: producer.send_batch([Message(TOPIC, x) for x in b]),
                    ledger,
                    stop_sending,
                )
            ),
            asyncio.ensure_future(
                produce(
                    "a",
                    ARROW_ROWS,
                    plan.arrow_sends_per_s,
                    lambda b: producer.send_arrow(pa.table({"body": pa.array(b, pa.binary())}), TOPIC),
                    ledger,
                    stop_sending,
                )
            ),
        ]
        churn = asyncio.ensure_future(churn_topics(target, producer, stop_sending, plan.interval_s / 3))
        started = time.perf_counter()
        restart_at_s, restart_took_s, life = plan.seconds / 2, 0.0, 1
        try:
            while (now := time.perf_counter() - started) < plan.seconds:
                next_sample = (len(samples) + 1) * plan.interval_s
                if life == 1 and restart_at_s <= next_sample:
                    await asyncio.sleep(max(0.0, restart_at_s - now))
                    seen_segments |= segments(target)
                    restarting = time.perf_counter()
                    await restart_broker(target)
                    restart_took_s, life = time.perf_counter() - restarting, 2
                    progress(f"broker restarted in {restart_took_s:.2f} s")
                    continue
                await asyncio.sleep(max(0.0, next_sample - now))
                await asyncio.to_thread(note_spark_progress, query, ledger)
                seen_segments |= segments(target)
                samples.append(await take_sample(target, ledger, time.perf_counter() - started, life))
                progress(", ".join(f"{c} {v}" for c, v in zip(SAMPLE_COLUMNS, samples[-1].row(), strict=True)))
            stop_sending.set()
            churned = await asyncio.wait_for(churn, 60)
            await asyncio.wait_for(asyncio.gather(*tasks[1:]), 60)
            await asyncio.wait_for(caught_up(ledger, query, spark, work_dir / "soak.parquet"), CATCH_UP_S)
        finally:
            stop_sending.set()
            stop_reading.set()
            await asyncio.wait_for(asyncio.gather(*tasks, churn, return_exceptions=True), 60)
            await producer.shutdown()
            await push.shutdown()
            await asyncio.to_thread(query.stop)
        deleted = len(seen_segments - segments(target))
        disk_at_end = disk_by_directory_mib(target.data_dir / "broker")
    checks = [ReaderCheck.of(name, ledger.acknowledged, reads) for name, reads in ledger.reads.items()]
    spark_reads = await asyncio.to_thread(parquet_reads, spark, work_dir / "soak.parquet")
    checks.append(ReaderCheck.of("Spark (Parquet)", ledger.acknowledged, spark_reads))
    return {
        "samples": samples,
        "checks": checks,
        "restart_at_s": restart_at_s,
        "restart_took_s": round(restart_took_s, 2),
        "topics_churned": churned,
        "summary": summary(
            samples,
            restart_at_s + plan.warm_up_s,
            checks,
            {
                "acknowledged": len(ledger.acknowledged),
                "failed_sends": ledger.failed_sends,
                "segments_deleted_by_retention": deleted,
            },
            disk_at_end,
        ),
    }


async def main(seconds: float, limit: int) -> None:
    """`limit` is not used: the soak runs for a time, not a count."""

    spark = local_session("rocketspark-soak", master="local[2]", **{"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with tempfile.TemporaryDirectory(prefix="rocketspark-soak-") as tmp:
            result = await run(SoakPlan.for_seconds(seconds), spark, Path(tmp))
    finally:
        spark.stop()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    figure = RESULTS_DIR / f"soak-{stamp}.png"
    plot(result["samples"], result["restart_at_s"], figure)
    notes = {
        **result["summary"],
        "restart_took_s": result["restart_took_s"],
        "topics_churned": result["topics_churned"],
        "figure": figure.name,
    }
    record("soak", SAMPLE_COLUMNS, [s.row() for s in result["samples"]], notes)
    for check in result["checks"]:
        progress(str(check))
    progress(f"summary: {notes}")
