"""`spark-source`: Spark reading stored messages through the rocketmq source, against a ceiling.

The messages are stored first with Arrow sends (not measured), and up to SINGLE_SENT more with
single SEND_MESSAGE_V2 sends, 64 in flight, into a topic of their own (stored as RocketMQ's message
records, which the broker decodes into Arrow for the source). These measurements, in one local[2]
SparkSession:

- "1M batch read": `spark.read.format("rocketmq")` of the first million messages into the `noop`
  sink, in fresh Python workers, whose peak resident memory (VmHWM) is then read from /proc;
- "batch read, arrowEnable=false": the same read from a second broker started with
  `arrowEnable=false` (the standard codes only, as an Apache broker offers), holding as many
  messages sent to it the same way (the producer falls back to SEND_BATCH_MESSAGE with it);
  the two reads alternate, twice each, the faster of each counting;
- "ceiling": an `AvailableNow` stream from an in-memory Python data source that yields, per queue,
  as many rows as the broker holds, as copies of a Spark batch read from the broker beforehand:
  the cost of Spark's Python data source machinery with no network, no broker and no conversion;
- "rocketmq": an `AvailableNow` stream of every stored message into the `noop` sink;
- "single-sent": an `AvailableNow` stream of every single-sent message, against the same stream of
  as many Arrow-sent messages ("rocketmq" itself when there are as many, else a topic of that
  many Arrow-sent messages): what reading costs when messages were sent one at a time.
- the two batch reads of `bench.spark_source_reads`: one queue with and without `minPartitions`,
  and the last 1% by time with and without filter pushdown (messages read in the notes).

Row counts come from the queries' progress and must equal what the broker holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from bench import spark_source_reads
from bench.cluster import Cluster, cluster
from bench.consume import SINGLE_IN_FLIGHT, TOPIC, max_offsets, preload, preload_single
from bench.report import progress, record
from rocketspark.spark.options import parse
from rocketspark.spark.schema import SOURCE_SCHEMA
from rocketspark.spark.session import local_session
from rocketspark.spark.source.reading import puller_for, read_range
from rocketspark.spark.source.splitting import QueueRange

BROKER = "broker-a"
MEMORY_SAMPLE = 1_000_000
#: most messages stored with single sends (about 2 minutes of sending here); at most --messages
SINGLE_SENT = 1_000_000
SINGLE_TOPIC = "BenchSingleSent"
#: Arrow-sent messages as many as the single-sent ones, when fewer than TOPIC holds
PAIR_TOPIC = "BenchArrowSent"
REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class CopiesPartition(InputPartition):
    """`rows` rows made of copies of one Arrow batch (IPC bytes)."""

    batch_ipc: bytes
    rows: int


class CeilingStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """One micro-batch holding every partition, then nothing more."""

    def __init__(self, options: dict[str, str]) -> None:
        self.batch_ipc = Path(options["batch_file"]).read_bytes()
        self.rows = [int(n) for n in options["rows"].split(",")]

    def initialOffset(self) -> dict[str, Any]:
        return {"done": 0}

    def latestOffset(self, start: dict[Any, Any], limit: ReadLimit) -> dict[str, Any]:
        return {"done": 1}

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def partitions(self, start: dict[Any, Any], end: dict[Any, Any]) -> Sequence[InputPartition]:
        if start == end:
            return []
        return [CopiesPartition(self.batch_ipc, rows) for rows in self.rows if rows]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, CopiesPartition)
        with pa.ipc.open_stream(partition.batch_ipc) as reader:
            template = reader.read_next_batch()
        left = partition.rows
        while left > 0:
            batch = template if left >= template.num_rows else template.slice(0, left)
            yield batch
            left -= batch.num_rows

    def commit(self, end: dict[Any, Any]) -> None:
        pass


class CeilingDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "rocketspark_bench_ceiling"

    def schema(self) -> StructType:
        return SOURCE_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return CeilingStreamReader(dict(self.options))


def spark_batch_from_broker(target: Cluster, rows: int) -> pa.RecordBatch:
    """The first batch the source's read path yields for queue 0, as Spark receives it."""
    options = parse({"nameserver": target.namesrv_addr, "topic": TOPIC, "pullBatchSize": str(rows)}, streaming=False)
    return next(read_range(puller_for(options), options, QueueRange(TOPIC, BROKER, 0, 0, rows)))


def ipc_bytes(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def run_available_now(frame: DataFrame, checkpoint: Path, timeout_s: float) -> tuple[int, float]:
    """Rows read and seconds taken by an AvailableNow query into the noop sink."""
    started = time.perf_counter()
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    if not query.awaitTermination(timeout_s):
        query.stop()
        raise TimeoutError(f"the query did not finish within {timeout_s:.0f} s")
    elapsed = time.perf_counter() - started
    return sum(p["numInputRows"] for p in query.recentProgress), elapsed


def python_workers(spark: SparkSession) -> list[int]:
    """Pids of the Python processes under this Spark driver's JVM (daemon, workers, source runners)."""
    jvm_pid = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
    found = []
    for pid in descendants(jvm_pid):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue  # it exited meanwhile
        if b"python" in command:
            found.append(pid)
    return found


def reset_peak_memory(pids: list[int]) -> None:
    """Start the processes' peak resident size (VmHWM) afresh (Linux: write 5 to clear_refs)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            Path(f"/proc/{pid}/clear_refs").write_text("5")


def peak_memory(pids: list[int]) -> list[int]:
    """Peak resident bytes (VmHWM) of each process still running."""
    peaks = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        peaks.extend(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmHWM:"))
    return peaks


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def source(spark: SparkSession, target: Cluster, *, streaming: bool, topic: str = TOPIC, **options: str) -> DataFrame:
    reader = spark.readStream if streaming else spark.read
    reader = reader.format("rocketmq").option("nameserver", target.namesrv_addr).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def ending_offsets_map(stored: dict[int, int], total: int) -> dict[str, int]:
    """Per-queue ends that take about `total` messages from the start of every queue."""
    share = -(-total // len(stored))
    return {str(q): min(n, share) for q, n in stored.items()}


def ending_offsets(stored: dict[int, int], total: int) -> str:
    return json.dumps({TOPIC: {BROKER: ending_offsets_map(stored, total)}})


def timed_count(frame: DataFrame) -> tuple[int, float]:
    """Rows of a batch read into `count()`, and the seconds it took."""
    started = time.perf_counter()
    rows = frame.count()
    return rows, time.perf_counter() - started


def mib(values: list[int]) -> list[int]:
    return [v >> 20 for v in values]


def measure_streams(
    spark: SparkSession, target: Cluster, stored: dict[int, int], topics: dict[str, str], work: Path, timeout_s: float
) -> dict[str, tuple[int, float]]:
    """Each stream twice, alternating, so none gains from running later; the faster run counts.

    `topics`: the rocketmq streams to run besides the ceiling, by name, and the topic each reads.
    """
    template = spark_batch_from_broker(target, 10_000)
    (work / "batch.arrow").write_bytes(ipc_bytes(template))
    spark.dataSource.register(CeilingDataSource)
    best: dict[str, tuple[int, float]] = {}
    for round_number in range(2):
        for name in ("ceiling", *topics):
            if name == "ceiling":
                frame = (
                    spark.readStream.format(CeilingDataSource.name())
                    .option("batch_file", str(work / "batch.arrow"))
                    .option("rows", ",".join(str(stored[q]) for q in sorted(stored)))
                    .load()
                )
            else:
                group = f"bench_spark_{round_number}"
                frame = source(
                    spark, target, streaming=True, topic=topics[name], consumerGroup=group, startingOffsets="earliest"
                )
            rows, seconds = run_available_now(frame, work / f"{name}-{round_number}", timeout_s)
            progress(f"{name}: {rows:,} rows in {seconds:.1f} s ({rows / seconds:,.0f} rows/s)")
            if name not in best or seconds < best[name][1]:
                best[name] = (rows, seconds)
    return best


async def store(target: Cluster, limit: int) -> tuple[dict[str, str], dict[str, int]]:
    """Store the messages: `limit` Arrow-sent ones in TOPIC, as many as SINGLE_SENT (at most `limit`)
    single-sent ones in SINGLE_TOPIC, and as many Arrow-sent ones in PAIR_TOPIC when TOPIC has more.

    Returns the topic each rocketmq stream reads, and the single sends: acknowledged, stored (which
    the single-sent stream must read), a second.
    """
    single = min(limit, SINGLE_SENT)
    topics = {"rocketmq": TOPIC, "single-sent": SINGLE_TOPIC}
    progress(f"storing {limit:,} messages")
    await preload(target, limit)
    if single < limit:
        progress(f"storing {single:,} messages into {PAIR_TOPIC}")
        await preload(target, single, topic=PAIR_TOPIC)
        topics["arrow-sent"] = PAIR_TOPIC
    progress(f"storing {single:,} messages with single sends, {SINGLE_IN_FLIGHT} in flight")
    rate = await preload_single(target, single, SINGLE_TOPIC)
    stored = sum((await max_offsets(target, SINGLE_TOPIC)).values())
    progress(f"stored them at {rate:,.0f} msg/s")
    if stored != single:
        progress(f"WARNING: {single:,} single sends acknowledged, but the broker holds {stored:,}")
    return topics, {"acknowledged": single, "stored": stored, "per_s": round(rate)}


def batch_reads(
    spark: SparkSession, targets: dict[str, Cluster], stored: dict[str, dict[int, int]], sample: int
) -> tuple[dict[str, tuple[int, float]], list[int]]:
    """`sample` messages read by `spark.read` from the Arrow broker and from the arrowEnable=false
    one, alternating, twice each: the faster (rows, seconds) of each, and the Python processes' peak
    resident bytes in the first Arrow read. `targets` and `stored`: each broker by name ("arrow",
    "standard") and what its queues hold."""
    progress("warming up: starting Python workers")
    for name, each in targets.items():
        source(spark, each, streaming=False, endingOffsets=ending_offsets(stored[name], 10_000)).count()
    workers = python_workers(spark)
    batch: dict[str, tuple[int, float]] = {}
    peaks: list[int] = []
    for _ in range(2):
        for name, each in targets.items():
            ends = ending_offsets(stored[name], sample)
            first_arrow = name == "arrow" and not peaks
            if first_arrow:
                reset_peak_memory(workers)
            read, seconds = timed_count(source(spark, each, streaming=False, endingOffsets=ends))
            if first_arrow:
                peaks = peak_memory(workers)
            expected = sum(ending_offsets_map(stored[name], sample).values())
            assert read == expected, f"the {name} batch read returned {read:,} rows, not {expected:,}"
            progress(f"batch read, {name}: {read:,} rows in {seconds:.1f} s ({read / seconds:,.0f} rows/s)")
            if name not in batch or seconds < batch[name][1]:
                batch[name] = (read, seconds)
    progress(f"Python processes peaked at {mib(peaks)} MiB in the first Arrow batch read")
    return batch, peaks


async def main(seconds: float, limit: int) -> None:
    timeout_s = max(seconds, 600.0)
    with (
        cluster() as target,
        cluster(broker_settings=("arrowEnable=false",)) as standard,
        tempfile.TemporaryDirectory(prefix="rocketspark-bench-spark-") as tmp,
    ):
        work = Path(tmp)
        topics, singles = await store(target, limit)
        stored = await max_offsets(target)
        total = sum(stored.values())
        sample = min(MEMORY_SAMPLE, total)
        progress(f"storing {sample:,} messages in the arrowEnable=false broker (standard batches)")
        await preload(standard, sample)
        targets = {"arrow": target, "standard": standard}
        held = {"arrow": stored, "standard": await max_offsets(standard)}
        # the ceiling's classes must be importable by Spark's Python workers
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
        spark = local_session(
            "rocketspark-bench",
            master="local[2]",
            **{"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"},
        )
        try:
            batch, batch_peaks = batch_reads(spark, targets, held, sample)
            best = measure_streams(spark, target, stored, topics, work, timeout_s)
            stream_peaks = peak_memory(python_workers(spark))
            batch_read = functools.partial(source, spark, target, streaming=False)
            split = spark_source_reads.min_partitions(batch_read, stored, BROKER)
            # on a thread of its own: it asks the broker's counters with asyncio.run, and this is a running loop
            pushed = await asyncio.to_thread(spark_source_reads.pushdown, spark, batch_read, target, stored, BROKER)
        finally:
            spark.stop()
    rate = {name: rows / seconds for name, (rows, seconds) in best.items()}
    batch_rate = {name: rows / seconds for name, (rows, seconds) in batch.items()}
    standard_ratio = batch_rate["standard"] / batch_rate["arrow"]
    arrow_sent = "arrow-sent" if "arrow-sent" in best else "rocketmq"
    single_ratio = rate["single-sent"] / rate[arrow_sent]
    rows = [
        ["batch read (spark.read)", *_figures(batch["arrow"]), max(batch_peaks) >> 20, "-", "-", "-"],
        ["batch read, arrowEnable=false", *_figures(batch["standard"]), "-", "-", "-", round(standard_ratio, 2)],
        ["ceiling (in-memory source)", *_figures(best["ceiling"]), "-", "-", "-", "-"],
        ["rocketmq (AvailableNow)", *_figures(best["rocketmq"]), max(stream_peaks) >> 20],
    ]
    rows[-1] += [round(rate["rocketmq"] / rate["ceiling"], 2), "-", "-"]
    if "arrow-sent" in best:
        rows.append(["rocketmq, Arrow-sent (AvailableNow)", *_figures(best["arrow-sent"]), "-"])
        rows[-1] += [round(rate["arrow-sent"] / rate["ceiling"], 2), "-", "-"]
    rows.append([f"rocketmq, single-sent, {SINGLE_IN_FLIGHT} in flight", *_figures(best["single-sent"]), "-"])
    rows[-1] += [round(rate["single-sent"] / rate["ceiling"], 2), round(single_ratio, 2), "-"]
    rows += spark_source_reads.table_rows(split, pushed)
    progress(f"single-sent {rate['single-sent']:,.0f} rows/s, Arrow-sent {rate[arrow_sent]:,.0f}: {single_ratio:.2f}")
    progress(f"batch read arrowEnable=false {batch_rate['standard']:,.0f} rows/s: {standard_ratio:.2f} of Arrow's")
    notes = {
        "stored": total,
        "queues": len(stored),
        "single_sends_acknowledged": singles["acknowledged"],
        "single_sent_stored": singles["stored"],
        "single_sends_per_s": singles["per_s"],
        "streams read every stored message": best["rocketmq"][0] == total == best["ceiling"][0]
        and best["single-sent"][0] == singles["stored"]
        and best[arrow_sent][0] == singles["acknowledged"],
        "single_sent_vs_arrow_sent": round(single_ratio, 3),
        "batch_read_standard_vs_arrow": round(standard_ratio, 3),
        "python_process_peaks_mib_batch_read": mib(batch_peaks),
        "python_process_peaks_mib_after_streams": mib(stream_peaks),
        "one_queue_batch_read": split,
        "last_1_percent_by_time": pushed,
    }
    columns = [
        "read",
        "rows",
        "seconds",
        "rows/s",
        "Python peak MiB",
        "vs ceiling",
        "single / Arrow-sent",
        "arrowEnable=false / Arrow",
    ]
    record("spark-source", columns, rows, notes)


def _figures(measured: tuple[int, float]) -> list[Any]:
    """rows, seconds, rows/s of a measured stream."""
    rows, seconds = measured
    return [rows, round(seconds, 1), round(rows / seconds)]
