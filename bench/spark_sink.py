"""`spark-sink`: `df.write.format("rocketmq")` of 128-byte bodies, against two ceilings.

One local[2] SparkSession writes the same DataFrame (`spark.range` with a body built from the id,
padded to 128 bytes, as binary) in two ways, alternating, twice each (the faster run counts):

- "discard": a Python `DataSourceArrowWriter` that counts its batches' rows and drops them, the
  cost of Spark's side (Spark's JVM `noop` sink skips the Python writer and is no fair ceiling);
- "rocketmq": the sink, each run into a fresh 8-queue topic; the broker must then hold every row;
- "rocketmq, arrowEnable=false": the same into a second broker started with `arrowEnable=false`
  (the standard codes only, as an Apache broker offers: the sink sends SEND_BATCH_MESSAGE);
- "rocketmq transactional": right after the plain write, the sink with `transactional=true` (a batch
  write, so with `txnAppId` and `txnVersion`, which name its record) of as many rows into the default
  broker (batches of half messages, ended by range), its ratio to the plain write of the same round
  recorded; and of at most APACHE_TRANSACTIONAL_ROWS rows into a third broker of `flavor=apache` (one
  half message and one END per row, as Apache RocketMQ takes them).

The other ceiling is the broker's: the `ingest` scenario's Arrow sends (batches of 10,000, 2 in
flight, ASYNC_FLUSH) of as many messages, measured in the same run, before and after Spark.

With `BENCH_PROFILE_DIR` set, py-spy records Spark's Python processes and the broker during one
extra sink write, and one extra transactional write, into subdirectories `plain` and
`transactional` of that directory (raw collapsed stacks, one file per process).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from bench import ingest
from bench.cluster import Cluster, cluster
from bench.report import progress, record
from bench.spark_source import REPO_ROOT, python_workers
from rocketspark.client.api import admin, offset
from rocketspark.processes import wait_registered
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient
from rocketspark.spark.session import local_session

BODY_BYTES = 128
QUEUES = 8
ROUNDS = 2
#: rows of the transactional write into the flavor=apache broker (one half message and one END per row)
APACHE_TRANSACTIONAL_ROWS = 50_000


@dataclass
class DiscardCommitMessage(WriterCommitMessage):
    rows: int


class DiscardWriter(DataSourceArrowWriter):
    """Counts the rows of every Arrow batch and keeps nothing; the driver writes the total to a file."""

    def __init__(self, count_file: str) -> None:
        self.count_file = count_file

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DiscardCommitMessage:
        return DiscardCommitMessage(sum(batch.num_rows for batch in iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, DiscardCommitMessage))
        Path(self.count_file).write_text(str(rows))


class DiscardDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "rocketspark_bench_discard"

    def writer(self, schema: StructType, overwrite: bool) -> DiscardWriter:
        return DiscardWriter(self.options["count_file"])


def bodies(spark: SparkSession, rows: int) -> DataFrame:
    """`rows` rows of one `body` column: the id, padded with dots to 128 bytes, as binary."""
    padded = F.rpad(F.col("id").cast("string"), BODY_BYTES, ".")
    return spark.range(rows, numPartitions=2).select(padded.cast("binary").alias("body"))


async def create_topic(target: Cluster, topic: str) -> None:
    remoting = RemotingClient()
    try:
        await admin.create_topic(remoting, target.broker.address, TopicConfig(topic, QUEUES, QUEUES))
    finally:
        await remoting.close()


async def stored(target: Cluster, topic: str) -> int:
    remoting = RemotingClient()
    try:
        return sum([await offset.get_max_offset(remoting, target.broker.address, topic, q) for q in range(QUEUES)])
    finally:
        await remoting.close()


def write_discard(frame: DataFrame, count_file: Path) -> tuple[int, float]:
    count_file.unlink(missing_ok=True)
    started = time.perf_counter()
    frame.write.format(DiscardDataSource.name()).option("count_file", str(count_file)).mode("append").save()
    elapsed = time.perf_counter() - started
    return int(count_file.read_text()), elapsed


def write_rocketmq(frame: DataFrame, target: Cluster, topic: str, transaction_log: Path | None = None) -> float:
    """The sink's write; with `transaction_log`, a transactional one (`transactional=true`, its record
    named by a fresh `txnAppId`)."""
    started = time.perf_counter()
    writer = frame.write.format("rocketmq").option("nameserver", target.namesrv_addr).option("topic", topic)
    if transaction_log is not None:
        writer = writer.option("transactional", "true").option("transactionLog", str(transaction_log))
        writer = writer.option("txnAppId", f"{topic}-{uuid.uuid4().hex}").option("txnVersion", "1")
    writer.mode("append").save()
    return time.perf_counter() - started


async def write_transactional(
    frame: DataFrame, target: Cluster, label: str, topic: str, tmp: Path, rows: int, limit: int
) -> float:
    """A transactional write of the frame's first `rows` rows (of `limit`): rows/s; the broker must
    hold each once."""
    await fresh_topic(target, topic)
    elapsed = write_rocketmq(frame.limit(rows) if rows < limit else frame, target, topic, tmp / "txn")
    held = await stored(target, topic)
    progress(f"rocketmq transactional, {label}: {rows:,} rows in {elapsed:.1f} s: {held / elapsed:,.0f} rows/s")
    if held != rows:
        raise RuntimeError(f"the transactional sink wrote {rows:,} rows but the {label} broker holds {held:,}")
    return held / elapsed


async def fresh_topic(target: Cluster, topic: str) -> None:
    await create_topic(target, topic)
    await asyncio.to_thread(wait_registered, target.namesrv_addr, target.broker.address, (topic,))


@contextlib.contextmanager
def profiled(pids: dict[str, int], directory: Path) -> Iterator[None]:
    """py-spy records each process meanwhile (raw collapsed stacks, one line per stack and count)."""
    directory.mkdir(parents=True, exist_ok=True)
    recorders = [
        subprocess.Popen(
            [
                str(Path(sys.executable).with_name("py-spy")),
                "record",
                "--pid",
                str(pid),
                "--format",
                "raw",
                "--threads",
                "--nonblocking",
                "--rate",
                "200",
                "-o",
                str(directory / f"{name}.txt"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, pid in pids.items()
    ]
    time.sleep(1.0)  # py-spy attaches
    try:
        yield
    finally:
        for recorder in recorders:
            recorder.send_signal(signal.SIGINT)
        for recorder in recorders:
            recorder.wait(30)


async def write_standard(frame: DataFrame, standard: Cluster, topic: str, limit: int) -> float:
    """The sink's write into the arrowEnable=false broker: rows/s; the broker must hold every row."""
    await fresh_topic(standard, topic)
    elapsed = write_rocketmq(frame, standard, topic)
    held = await stored(standard, topic)
    progress(f"rocketmq, arrowEnable=false: {limit:,} rows in {elapsed:.1f} s: {held / elapsed:,.0f} rows/s")
    if held != limit:
        raise RuntimeError(f"the sink wrote {limit:,} rows but the arrowEnable=false broker holds {held:,}")
    return held / elapsed


async def ingest_ceiling(seconds: float, limit: int) -> float:
    row = await ingest.run_mode("arrow10k", "async", seconds, limit)
    rate = row[5]  # mode, flush, dup window, messages, seconds, msg/s
    assert isinstance(rate, int)
    return float(rate)


async def main(seconds: float, limit: int) -> None:
    ingest_rates = [await ingest_ceiling(seconds, limit)]
    best: dict[str, float] = {}
    rounds: list[float] = []
    verified = True
    apache_rows = min(limit, APACHE_TRANSACTIONAL_ROWS)
    with (
        cluster() as target,
        cluster(broker_settings=("arrowEnable=false",)) as standard,
        cluster(broker_settings=("flavor=apache",)) as apache,
        tempfile.TemporaryDirectory(prefix="rocketspark-bench-sink-") as tmp,
    ):
        # the discard source's classes must be importable by Spark's Python workers
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
        spark = local_session(
            "rocketspark-bench-sink",
            master="local[2]",
            **{"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"},
        )
        try:
            spark.dataSource.register(DiscardDataSource)
            frame = bodies(spark, limit)
            progress("warming up: starting Python workers, the producers and their connections")
            for each in (target, standard, apache):
                await fresh_topic(each, "BenchSinkWarmup")
                write_rocketmq(bodies(spark, 20_000), each, "BenchSinkWarmup")
            for each in (target, apache):
                await write_transactional(
                    bodies(spark, 2_000), each, "warm-up", "BenchSinkTxWarmup", Path(tmp), 2_000, 2_000
                )
            write_discard(bodies(spark, 20_000), Path(tmp) / "count")
            for round_number in range(ROUNDS):
                rows, elapsed = write_discard(frame, Path(tmp) / "count")
                verified &= rows == limit
                progress(f"discard: {rows:,} rows in {elapsed:.1f} s: {rows / elapsed:,.0f} rows/s")
                best["discard"] = max(best.get("discard", 0.0), rows / elapsed)
                topic = f"BenchSink{round_number}"
                await fresh_topic(target, topic)
                elapsed = write_rocketmq(frame, target, topic)
                held = await stored(target, topic)
                verified &= held == limit
                progress(f"rocketmq: {limit:,} rows in {elapsed:.1f} s ({held:,} stored): {held / elapsed:,.0f} rows/s")
                if held != limit:
                    raise RuntimeError(f"the sink wrote {limit:,} rows but the broker holds {held:,}")
                best["rocketmq"] = max(best.get("rocketmq", 0.0), held / elapsed)
                rate = await write_transactional(
                    frame, target, "default flavor", f"BenchSinkTx{round_number}", Path(tmp), limit, limit
                )
                best["transactional"] = max(best.get("transactional", 0.0), rate)
                rounds.append(
                    round(rate / (held / elapsed), 3)
                )  # this round's transactional / plain, one after the other
                best["standard"] = max(best.get("standard", 0.0), await write_standard(frame, standard, topic, limit))
                rate = await write_transactional(
                    frame, apache, "flavor=apache", f"BenchSinkTxApache{round_number}", Path(tmp), apache_rows, limit
                )
                best["transactional apache"] = max(best.get("transactional apache", 0.0), rate)
            profile_dir = os.environ.get("BENCH_PROFILE_DIR")
            if profile_dir:
                await profile_writes(spark, frame, target, Path(tmp), Path(profile_dir), limit)
        finally:
            spark.stop()
    ingest_rates.append(await ingest_ceiling(seconds, limit))
    report(best, ingest_rates, limit, apache_rows, verified, rounds)


async def profile_writes(
    spark: SparkSession, frame: DataFrame, target: Cluster, tmp: Path, directory: Path, limit: int
) -> None:
    """One plain and one transactional write under py-spy (BENCH_PROFILE_DIR)."""
    pids = {f"python-{pid}": pid for pid in python_workers(spark)}
    pids["broker"] = target.broker.pid
    for kind, log in (("plain", None), ("transactional", tmp / "txn")):
        await fresh_topic(target, f"BenchSinkProfiled{kind}")
        with profiled(pids, directory / kind):
            elapsed = write_rocketmq(frame, target, f"BenchSinkProfiled{kind}", log)
        progress(f"profiled {kind} write: {limit / elapsed:,.0f} rows/s; stacks in {directory / kind}")


def report(
    best: dict[str, float], ingest_rates: list[float], limit: int, apache_rows: int, verified: bool, rounds: list[float]
) -> None:
    spark_ceiling, broker_ceiling = best["discard"], max(ingest_rates)
    lower = min(spark_ceiling, broker_ceiling)

    def row(write: str, key: str, rows: int) -> list[object]:
        versus = "-" if key == "rocketmq" else round(best[key] / best["rocketmq"], 2)
        return [write, rows, round(best[key]), round(best[key] / lower, 2), versus]

    table = [
        ["ceiling: Python Arrow writer discarding its batches", limit, round(spark_ceiling), "-", "-"],
        ["ceiling: ingest, Arrow batches of 10,000 (ASYNC_FLUSH)", limit, round(broker_ceiling), "-", "-"],
        row('df.write.format("rocketmq")', "rocketmq", limit),
        row('df.write.format("rocketmq"), arrowEnable=false', "standard", limit),
        row('df.write.format("rocketmq") transactional=true', "transactional", limit),
        row('df.write.format("rocketmq") transactional=true, flavor=apache', "transactional apache", apache_rows),
    ]
    notes = {
        "body_bytes": BODY_BYTES,
        "queues": QUEUES,
        "rounds": ROUNDS,
        "every row counted by the discard writer and stored by the broker": verified,
        "ingest_rates": ingest_rates,
        "ratio_to_lower_ceiling": round(best["rocketmq"] / lower, 3),
        "transactional_vs_default": round(best["transactional"] / best["rocketmq"], 3),
        # the same ratio of each round's two writes, minutes apart at most (the best ones may be from
        # rounds of different loads on a shared machine)
        "transactional_vs_default_per_round": rounds,
        "transactional_apache_rows_per_s": round(best["transactional apache"]),
        "standard_vs_arrow": round(best["standard"] / best["rocketmq"], 3),
    }
    columns = ["write", "rows", "rows/s", "vs lower ceiling", 'vs df.write.format("rocketmq")']
    record("spark-sink", columns, table, notes)
