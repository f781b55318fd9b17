"""The jobs of jobs/ (rocketspark.apps): each `main()` run twice on the shared SparkSession against
real servers, checking what the second run does; one job under `spark-submit --master local[2]`."""

from __future__ import annotations

import logging
import os
import sys
import time
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from rocketspark import Producer
from rocketspark.apps import archive_topic, replay_range, topic_metrics
from rocketspark.apps.clickstream import Totals, clickstream_table
from rocketspark.apps.common import group_lag
from rocketspark.spark import versions
from tests.spark.child_jobs import run_in_own_group
from tests.spark.cluster import SparkCluster

ROOT = Path(__file__).resolve().parents[2]


def read_topic(spark: SparkSession, cluster: SparkCluster, topic: str) -> list[dict[str, object]]:
    frame = spark.read.format("rocketmq").option("nameserver", cluster.namesrv_addr).option("topic", topic).load()
    return [row.asDict() for row in frame.collect()]


def assert_caught_up(cluster: SparkCluster, group: str, topic: str, messages: int) -> None:
    """The group's offsets at the topic's end, as a job's AvailableNow run leaves them (before PySpark
    4.2, at the end of the batch before the last: docs/spark.md, "Spark versions")."""
    lags = group_lag(cluster.namesrv_addr, group, topic)
    assert sum(q.max_offset for q in lags) == messages
    if versions.has(versions.ADMISSION_CONTROL):
        assert all(q.lag == 0 for q in lags), lags


def test_archive_topic_second_run_exports_only_what_arrived_since(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = "JobsArchive"
    two_brokers.create_topic(topic, queues=2)
    first = two_brokers.produce(topic, 30)
    argv = [
        "--topic", topic, "--namesrv", two_brokers.namesrv_addr, "--group", "jobs_archive",
        "--output", str(tmp_path / "archive"), "--checkpoint", str(tmp_path / "checkpoint"),
    ]  # fmt: skip
    assert archive_topic.main(argv) == 0
    archived = spark.read.parquet(str(tmp_path / "archive"))
    assert sorted(r.msgId for r in archived.select("msgId").collect()) == sorted(r[4] for r in first)
    assert {p.name for p in (tmp_path / "archive").iterdir() if p.name.startswith("date=")}  # partitioned by date
    assert archived.where(F.col("date") != F.to_date("storeTimestamp")).count() == 0

    second = two_brokers.produce(topic, 20, first=30)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="jobs.archive_topic"):
        assert archive_topic.main(argv) == 0
    assert any("archived 20 messages" in r.getMessage() for r in caplog.records), caplog.text
    archived = spark.read.parquet(str(tmp_path / "archive"))
    ids = [r.msgId for r in archived.select("msgId").collect()]
    assert sorted(ids) == sorted(r[4] for r in first + second)  # the 20 new ones added, none twice
    assert_caught_up(two_brokers, "jobs_archive", topic, 50)


def test_replay_range_copies_the_range_and_a_second_run_copies_nothing(
    spark: SparkSession, two_brokers: SparkCluster, caplog: pytest.LogCaptureFixture
) -> None:
    source, target = "JobsReplaySource", "JobsReplayTarget"
    two_brokers.create_topic(source, queues=2)
    two_brokers.create_topic(target, queues=2)
    two_brokers.produce(source, 10)
    time.sleep(0.05)
    start = int(time.time() * 1000)
    time.sleep(0.05)
    in_range = two_brokers.produce(source, 12, first=10)
    time.sleep(0.05)
    end = int(time.time() * 1000)
    time.sleep(0.05)
    two_brokers.produce(source, 8, first=22)
    argv = [
        "--source", source, "--target", target, "--namesrv", two_brokers.namesrv_addr,
        "--start", str(start), "--end", str(end),
    ]  # fmt: skip
    assert replay_range.main(argv) == 0
    copies = read_topic(spark, two_brokers, target)
    assert sorted(c["body"] for c in copies) == sorted(r[7] for r in in_range)
    by_body = {r[7]: r for r in in_range}
    for copy in copies:
        original = by_body[bytes(copy["body"])]  # PySpark 4.0 collects binary as bytearray
        properties = copy["properties"]
        assert isinstance(properties, dict)
        assert properties["REPLAY_ORIGIN"] == f"{source}/{original[1]}/{original[2]}/{original[3]}"
        assert (copy["tags"], copy["keys"], properties["seq"]) == (
            original[5],
            original[6],
            original[7].split()[-1].decode(),
        )

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="jobs.replay_range"):
        assert replay_range.main(argv) == 0  # the same range again: everything is already there
    assert any("copied 0 messages" in r.getMessage() for r in caplog.records), caplog.text
    assert len(read_topic(spark, two_brokers, target)) == 12


def test_replay_range_fails_with_a_nonzero_exit_code(two_brokers: SparkCluster) -> None:
    common = ["--source", "A", "--target", "B", "--namesrv", two_brokers.namesrv_addr]
    assert replay_range.main([*common, "--start", "2000", "--end", "1000"]) == 1  # an empty range
    assert replay_range.main([*common, "--start", "yesterday", "--end", "1000"]) == 2  # bad flag
    assert replay_range.main(["--source", "A"]) == 2  # flags missing


def send_events(cluster: SparkCluster, topic: str, rows: int, seed: int) -> Totals:
    table, totals = clickstream_table(rows, seed, hours=0.25)
    with Producer("jobs_metrics_producer", namesrv_addr=cluster.namesrv_addr) as producer:
        assert sum(r.count for r in producer.send_arrow(table, topic)) == rows
    return totals


def parquet_totals(spark: SparkSession, path: Path) -> tuple[int, Totals]:
    rows = spark.read.parquet(str(path)).collect()
    assert len({r.minute for r in rows}) == len(rows)  # one row per window
    revenue = sum((r.revenue for r in rows), Decimal(0))
    totals = Totals(
        events=sum(r.events for r in rows),
        views=sum(r.views for r in rows),
        clicks=sum(r.clicks for r in rows),
        purchases=sum(r.purchases for r in rows),
        revenue_cents=int(revenue * 100),
    )
    return len(rows), totals


def test_topic_metrics_second_run_adds_the_new_events_to_the_windows(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path
) -> None:
    topic, output = "JobsClicks", "JobsClickMetrics"
    two_brokers.create_topic(topic, queues=2)
    two_brokers.create_topic(output, queues=1)
    expected = send_events(two_brokers, topic, 400, seed=1)
    argv = [
        "--topic", topic, "--namesrv", two_brokers.namesrv_addr, "--group", "jobs_metrics",
        "--parquet", str(tmp_path / "metrics"), "--checkpoint", str(tmp_path / "checkpoint"),
        "--output-topic", output,
    ]  # fmt: skip
    assert topic_metrics.main(argv) == 0
    windows, totals = parquet_totals(spark, tmp_path / "metrics")
    assert totals == expected
    assert windows == 15  # a quarter of an hour of events
    assert len(read_topic(spark, two_brokers, output)) == windows

    expected.add(send_events(two_brokers, topic, 300, seed=2))
    assert topic_metrics.main(argv) == 0  # from the checkpoint: its state plus the 300 new events
    windows, totals = parquet_totals(spark, tmp_path / "metrics")
    assert totals == expected
    assert windows == 15
    sent = read_topic(spark, two_brokers, output)
    assert len(sent) == 2 * windows  # complete mode: every window again
    assert_caught_up(two_brokers, "jobs_metrics", topic, 700)


@pytest.mark.slow
def test_archive_topic_under_spark_submit(two_brokers: SparkCluster, tmp_path: Path) -> None:
    """The job in a Spark of its own: its output is read with pyarrow, so the test needs not the run's
    SparkSession and can run beside the Spark tests' worker."""
    topic = "JobsArchiveSubmit"
    two_brokers.create_topic(topic, queues=2)
    produced = two_brokers.produce(topic, 25)
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        NAMESRV_ADDR=two_brokers.namesrv_addr,
        ARCHIVE_TOPIC=topic,
        ARCHIVE_GROUP="jobs_archive_submit",
    )
    spark_submit = Path(sys.executable).parent / "spark-submit"  # pip's pyspark ships it
    command = [
        str(spark_submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
        str(ROOT / "jobs" / "archive_topic.py"),
        "--output", str(tmp_path / "archive"), "--checkpoint", str(tmp_path / "checkpoint"),
    ]  # fmt: skip
    # any directory: the job's code is the installed package
    result = run_in_own_group(command, cwd=tmp_path, env=env, timeout_s=240)
    assert result.returncode == 0, result.stderr[-5000:]
    # spark-submit's Python runner passes the driver's stderr (the job's log) on to its own stdout
    assert "jobs.archive_topic: archived 25 messages" in result.stdout, result.stdout[-5000:]
    archived = pq.read_table(str(tmp_path / "archive"), columns=["msgId"])
    assert sorted(archived.column("msgId").to_pylist()) == sorted(r[4] for r in produced)
