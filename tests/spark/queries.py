"""The Spark side of the Spark tests: start source queries, run them, tamper with checkpoints."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructType

from rocketspark.spark import versions
from rocketspark.spark.datasource import RocketMQDataSource
from rocketspark.spark.schema import SOURCE_SCHEMA
from rocketspark.spark.source.stream_reader import RocketMQStreamReader
from tests.spark.child_jobs import run_in_own_group
from tests.spark.cluster import Row, SparkCluster

#: the columns a test can predict from what it sent
COLUMNS = ["topic", "brokerName", "queueId", "queueOffset", "msgId", "tags", "keys", "body"]
QUERY_TIMEOUT_S = 180
#: a test of what needs streaming admission control: trigger limits, Trigger.AvailableNow run by the
#: source, the progress's latest offsets (`make test-oldest-spark` skips it on PySpark 4.0)
needs_admission_control = pytest.mark.skipif(
    not versions.has(versions.ADMISSION_CONTROL), reason="streaming admission control: PySpark 4.2 and newer"
)


def stream(spark: SparkSession, cluster: SparkCluster, topic: str, group: str, **options: str) -> DataFrame:
    reader = spark.readStream.format("rocketmq").option("nameserver", cluster.namesrv_addr).option("topic", topic)
    reader = reader.option("consumerGroup", group)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def stream_reader(options: dict[str, str]) -> RocketMQStreamReader:
    """The stream reader Spark gets for `options` from the running PySpark (the driver's one)."""
    source = RocketMQDataSource(options)
    return source.streamReader(source.schema())


def plan_next(reader: RocketMQStreamReader, start: dict[str, Any]) -> dict[str, Any]:
    """`reader.latestOffset` as the running PySpark calls it for the batch after `start`: with the
    start and ReadAllAvailable from 4.2 on; with no argument before (the reader knows its start)."""
    if versions.has(versions.ADMISSION_CONTROL):
        from pyspark.sql.streaming.datasource import ReadAllAvailable  # new in 4.2

        return reader.latestOffset(start, ReadAllAvailable())  # type: ignore[call-arg]
    return reader.latestOffset()


def batch(spark: SparkSession, cluster: SparkCluster, topic: str, **options: str) -> DataFrame:
    """A bounded read of `topic` (spark.read) with `options`."""
    reader = spark.read.format("rocketmq").option("nameserver", cluster.namesrv_addr).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def run_python_with_spark(code: str, *args: str, cwd: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """`code` run by this interpreter in a process of its own, set up to start Spark (its Python
    workers run this interpreter, bound to 127.0.0.1): a SparkSession of its own, not the test
    run's."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    return run_in_own_group([sys.executable, "-c", code, *args], env=env, cwd=cwd, timeout_s=timeout_s)


def run_available_now(
    frame: DataFrame, sink: str, checkpoint: Path, *, name: str = "", path: str = "", expect_error: bool = False
) -> StreamingQuery:
    """Run `frame` into `sink` (memory table `name` or parquet at `path`) until AvailableNow finishes."""
    writer = frame.writeStream.format(sink).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    query = writer.start(path) if sink == "parquet" else writer.queryName(name).start()
    try:
        finished = query.awaitTermination(QUERY_TIMEOUT_S)
    except Exception:
        if expect_error:
            return query
        raise
    assert finished, "the AvailableNow query did not finish"
    assert not expect_error, "the query did not fail"
    return query


@contextlib.contextmanager
def rows_reach_the_sink_as_made(spark: SparkSession, rows: int) -> Iterator[None]:
    """Meanwhile the sink gets a task's rows `rows` at a time as the query makes them, not at its end.

    Spark hands a Python data source writer its input as an Arrow stream written through a buffer of
    spark.sql.execution.pandas.udf.buffer.size bytes (unset: spark.buffer.size, 64 KiB). Batches of
    short rows wait there until the task's last row (or its failure, and the sink gets none of them),
    whatever maxRecordsPerBatch says; a buffer smaller than one batch passes each on at once."""
    settings = {
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(rows),
        "spark.sql.execution.pandas.udf.buffer.size": "64",
    }
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def start_stream(frame: DataFrame, output: Path, checkpoint: Path) -> StreamingQuery:
    """Run `frame` into parquet at `output` with a 300 ms processing-time trigger until stopped."""
    writer = frame.writeStream.format("parquet").option("checkpointLocation", str(checkpoint))
    return writer.trigger(processingTime="300 milliseconds").start(str(output))


def run_recording_batches(frame: DataFrame, checkpoint: Path, seen: dict[int, list[list[str]]]) -> None:
    """Run `frame` with AvailableNow into foreachBatch, adding each batch's sorted msgIds to
    `seen[batchId]` (a batch Spark runs again shows up twice)."""

    def record(batch: DataFrame, batch_id: int) -> None:
        seen.setdefault(batch_id, []).append(sorted(r.msgId for r in batch.select("msgId").collect()))

    writer = frame.writeStream.foreachBatch(record).option("checkpointLocation", str(checkpoint))
    assert writer.trigger(availableNow=True).start().awaitTermination(QUERY_TIMEOUT_S)


def expected_frame(spark: SparkSession, rows: list[Row]) -> DataFrame:
    return spark.createDataFrame(rows, StructType([SOURCE_SCHEMA[name] for name in COLUMNS]))


def newest(checkpoint: Path, log: str) -> int:
    """The newest batch id in the checkpoint's `offsets` or `commits` log (-1 if none)."""
    return max((int(p.name) for p in (checkpoint / log).iterdir() if p.name.isdigit()), default=-1)


def forget_last_commit(checkpoint: Path) -> int:
    """Delete the newest commit record (and its checksum) as if the query died before committing it."""
    commits = checkpoint / "commits"
    last = newest(checkpoint, "commits")
    assert last >= 0, "no batch was committed"
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


def stored_rows(spark: SparkSession, path: Path) -> int:
    """Rows a parquet sink holds so far (0 before its first committed batch)."""
    if not any(p.name.isdigit() for p in path.glob("_spark_metadata/*")):
        return 0
    return spark.read.parquet(str(path)).count()


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    """Check `condition` until it holds; fail after `timeout_s`. The pauses grow from 50 ms to 0.5 s:
    a condition that holds soon is seen soon, one that takes long (many are Spark jobs) is not
    asked more often than every half second."""
    deadline = time.monotonic() + timeout_s
    pause = 0.05
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def stamp_between(gap_s: float = 0.05) -> dt.datetime:
    """A time after every message sent before the call and before every one sent after it, with
    `gap_s` seconds on each side."""
    time.sleep(gap_s)
    stamp = dt.datetime.now(dt.UTC)
    time.sleep(gap_s)
    return stamp
