"""Filter pushdown of batch reads: the same rows with and without the session's setting, fewer
messages read with it where the running PySpark keeps a pushed read in its scan (none of 4.x: see
`SCAN_SCOPED_PUSHDOWN`; there the source takes no filter and Spark applies them), and reads with the
setting off working as before. `test_pushdown_scope.py` checks that no read narrows another."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from chispa import assert_df_equality
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from rocketspark.spark.source.batch_reader import SCAN_SCOPED_PUSHDOWN
from rocketspark.spark.source.pushdown import TIME_MARGIN_MS
from tests.spark.cluster import SparkCluster
from tests.spark.queries import batch, run_available_now, stamp_between, stream

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def now() -> dt.datetime:
    """A time between two sends farther from both than the margin of the pushed time cut, so the
    read of the messages after it reads no message before it."""
    return stamp_between(TIME_MARGIN_MS / 1000 + 0.2)


def read(spark: SparkSession, cluster: SparkCluster, condition: Column, *, pushdown: bool, **options: str) -> DataFrame:
    """The filtered read, computed with the session's pushdown setting on or off."""
    spark.conf.set(PUSHDOWN, str(pushdown).lower())
    try:
        return batch(spark, cluster, "Pushed", **options).filter(condition).drop("properties").localCheckpoint()
    finally:
        spark.conf.unset(PUSHDOWN)


@pytest.mark.slow
def test_pushed_filters_give_the_same_rows_and_read_fewer_messages(spark, two_brokers) -> None:
    two_brokers.create_topic("Pushed", queues=2)
    two_brokers.produce("Pushed", 100)
    first = now()
    two_brokers.produce("Pushed", 100, first=100)
    second = now()
    two_brokers.produce("Pushed", 100, first=200)
    stamp = F.col("storeTimestamp")

    def same(condition: Column, **options: str) -> DataFrame:
        pushed = read(spark, two_brokers, condition, pushdown=True, **options)
        assert_df_equality(
            pushed, read(spark, two_brokers, condition, pushdown=False, **options), ignore_row_order=True
        )
        return pushed

    def pulled(pushdown: bool) -> int:
        """Messages the brokers sent for the read of the last third by time."""
        before = two_brokers.runtime_counters()["arrowPullMessages"]
        assert read(spark, two_brokers, stamp >= F.lit(second), pushdown=pushdown).count() == 100
        return two_brokers.runtime_counters()["arrowPullMessages"] - before

    assert (pulled(True), pulled(False)) == (100 if SCAN_SCOPED_PUSHDOWN else 300, 300)
    assert same(stamp >= F.lit(second)).count() == 100
    assert same(stamp.between(F.lit(first), F.lit(second)) & (F.col("queueId") == 1)).count() == 50
    window = (stamp > F.lit(first)) & (stamp < F.lit(second)) & F.col("queueId").isin(0)
    assert same(window & (F.col("queueOffset") >= 30) & (F.col("queueOffset") <= 40)).count() == 2 * 11
    assert same(F.col("tags") == "A").count() == 100
    assert same(F.col("tags").isin("A", "B"), tags="B || C").count() == 100  # B only
    assert same(F.col("tags").isin("A"), tags="B").count() == 0
    mixed = (
        (stamp >= F.lit(first))
        & F.col("body").cast("string").contains("1")
        & ((F.col("tags") == "A") | (F.col("queueId") == 1))
    )
    assert same(mixed).count() > 0

    def spark_filters(pushdown: bool) -> str:
        """The Filter of the read's physical plan: the conditions Spark applies itself."""
        spark.conf.set(PUSHDOWN, str(pushdown).lower())
        try:
            frame = batch(spark, two_brokers, "Pushed").filter((F.col("tags") == "A") & (F.col("queueOffset") > -1))
            plan = frame._jdf.queryExecution().executedPlan().toString()
        finally:
            spark.conf.unset(PUSHDOWN)
        return next((line for line in plan.splitlines() if "Filter" in line), "")

    # explain() shows what was pushed: the conditions the read took over are gone from Spark's Filter
    conditions = re.compile(r"tags#\d+ = A\b|queueOffset#\d+L? > -1\b")
    assert len(conditions.findall(spark_filters(False))) == 2
    assert len(conditions.findall(spark_filters(True))) == (0 if SCAN_SCOPED_PUSHDOWN else 2)


@pytest.mark.slow
def test_a_filtered_stream_reads_the_rows_of_its_filter_with_pushdown_on(spark, two_brokers, checkpoint) -> None:
    """Spark pushes no filter to a Python stream: with the setting on, a filtered stream still runs
    and gives the rows the filter keeps."""
    two_brokers.create_topic("PushedStream", queues=2)
    sent = two_brokers.produce("PushedStream", 60, batched=True)
    spark.conf.set(PUSHDOWN, "true")
    try:
        frame = stream(spark, two_brokers, "PushedStream", "pushed_stream_group", startingOffsets="earliest")
        kept = (F.col("tags") == "A") & (F.col("queueId") == 1) & (F.col("storeTimestamp") > F.lit(T0))
        run_available_now(frame.filter(kept), "memory", checkpoint, name="pushed_stream")
    finally:
        spark.conf.unset(PUSHDOWN)
    got = spark.table("pushed_stream").selectExpr("CAST(body AS STRING) AS body").collect()
    expected = sorted(body.decode() for _, _, queue_id, _, _, tag, _, body in sent if tag == "A" and queue_id == 1)
    assert sorted(r.body for r in got) == expected and expected
