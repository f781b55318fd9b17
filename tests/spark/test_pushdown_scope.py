"""A filter pushed by one read of a DataFrame narrows no other read of it.

PySpark 4.1-4.3 keep the read that a pushing reader planned on the DataFrame's relation and hand
it to every later scan of that relation (see `SCAN_SCOPED_PUSHDOWN` in
`rocketspark.spark.source.batch_reader`). These tests run the same sequence of reads of ONE
DataFrame with the session's pushdown setting on and off and compare every answer: counts,
collected rows (as sorted tuples, compared in Python, so no Spark job per comparison), a join and a
union of two differently filtered views, a cached DataFrame and a temporary view queried with SQL,
for each column the source can take filters on.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from pyspark.sql import DataFrame, SparkSession

from rocketspark.spark import versions
from tests.spark.cluster import SparkCluster
from tests.spark.queries import batch, stamp_between

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
TOPIC = "PushScope"
#: each pushable column with two conditions on it (SQL) that keep different rows
CONDITIONS: dict[str, Callable[[str], tuple[str, str]]] = {
    "storeTimestamp": lambda middle: (
        f"storeTimestamp >= TIMESTAMP'{middle}'",
        f"storeTimestamp < TIMESTAMP'{middle}'",
    ),
    "queueId": lambda _: ("queueId = 1", "queueId IN (0)"),
    "queueOffset": lambda _: ("queueOffset >= 40", "queueOffset < 10"),
    "tags": lambda _: ("tags = 'A'", "tags IN ('B', 'C')"),
}
#: what a read keeps of each row: enough to tell rows apart and compare them
KEPT = ["msgId", "queueId", "queueOffset", "tags"]


@pytest.fixture(scope="module")
def middle(two_brokers: SparkCluster) -> str:
    """The topic: 120 messages on two queues, then a time (as SQL's timestamp text, UTC like the
    session), then 120 more."""
    two_brokers.create_topic(TOPIC, queues=2)
    two_brokers.produce(TOPIC, 120, batched=True)
    stamp = stamp_between(1.2)
    two_brokers.produce(TOPIC, 120, first=120, batched=True)
    return stamp.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


#: one read's answer: a count, or the rows kept (KEPT) in order
Answer = int | list[tuple[object, ...]]


def reads(spark: SparkSession, base: DataFrame, first: str, second: str) -> list[Answer]:
    """The sequence of reads of `base`, each as its answer (the order in which they run is the
    point: every read is planned and run before the next is)."""
    answers: list[Answer] = []

    def answer(frame: DataFrame) -> None:
        answers.append(sorted(tuple(row) for row in frame.select(*KEPT).collect()))

    def count(frame: DataFrame) -> None:
        answers.append(frame.count())

    count(base)
    count(base.filter(first))
    count(base)  # the defect: 400 -> 40 after a filtered count
    answer(base)
    answer(base.filter(second))
    answer(base)
    left, right = base.filter(first), base.filter(second)
    answer(left.join(right.select("msgId"), "msgId", "left_anti"))
    count(left.join(right.select("msgId"), "msgId"))
    answer(left.union(right))
    answer(left.alias("l").join(base.alias("b"), "msgId").select("msgId", "l.queueId", "l.queueOffset", "l.tags"))
    cached = base.cache()
    try:
        count(cached.filter(first))
        count(cached)
    finally:
        cached.unpersist()
    base.createOrReplaceTempView("push_scope")
    count(spark.sql(f"SELECT * FROM push_scope WHERE {first}"))
    answer(spark.sql("SELECT * FROM push_scope"))
    count(base.filter(second))
    count(base)
    return answers


def run(spark: SparkSession, cluster: SparkCluster, first: str, second: str, *, pushdown: bool) -> list[Answer]:
    spark.conf.set(PUSHDOWN, str(pushdown).lower())
    try:
        return reads(spark, batch(spark, cluster, TOPIC), first, second)
    finally:
        spark.conf.unset(PUSHDOWN)


@pytest.mark.slow
@pytest.mark.parametrize("column", list(CONDITIONS))
def test_every_read_of_one_dataframe_sees_only_its_own_filters(
    spark: SparkSession, two_brokers: SparkCluster, middle: str, column: str
) -> None:
    first, second = CONDITIONS[column](middle)
    pushed = run(spark, two_brokers, first, second, pushdown=True)
    plain = run(spark, two_brokers, first, second, pushdown=False)
    for step, (got, expected) in enumerate(zip(pushed, plain, strict=True)):
        assert got == expected, f"read {step} of the sequence differs with pushdown on ({column})"
    whole, filtered = plain[0], plain[1]
    assert isinstance(whole, int) and isinstance(filtered, int)
    assert whole == 240 and 0 < filtered < whole  # the filter keeps some rows, not all


def test_a_dataframe_keeps_the_ranges_of_its_first_plan(spark: SparkSession, two_brokers: SparkCluster) -> None:
    """docs/spark.md: a batch DataFrame's ranges are resolved when it is first planned; `load()`
    again reads what arrived since. (PySpark 4.0 plans every query of it again.)"""
    two_brokers.create_topic("PlannedOnce", queues=2)
    two_brokers.produce("PlannedOnce", 20, batched=True)
    frame = batch(spark, two_brokers, "PlannedOnce")
    assert frame.count() == 20
    two_brokers.produce("PlannedOnce", 10, first=20, batched=True)
    again = 20 if versions.has(versions.BATCH_READ_KEPT) else 30
    assert (frame.count(), batch(spark, two_brokers, "PlannedOnce").count()) == (again, 30)
