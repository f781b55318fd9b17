"""Sinks share Spark's Python workers: queries with one producer group and different send settings."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.spark.cluster import SparkCluster
from tests.spark.test_sink import read_topic, write


@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transactional"])
def test_writes_of_one_group_with_different_send_settings_both_write_every_row(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path, transactional: bool
) -> None:
    """Two writes, one after the other, with the same producer group but other `sendTimeoutMs` and
    `retries`: Spark runs both in its reused Python workers (local[2], two tasks each, so each worker
    serves both), whose one producer of the group takes each write's settings per send."""
    topic = f"SharedWorkers{'Txn' if transactional else 'Plain'}"
    two_brokers.create_topic(topic)
    group = f"shared_{topic}"
    expected: Counter[str] = Counter()
    for run, (timeout_ms, retries) in enumerate([("3000", "2"), ("7000", "0")]):
        bodies = [f"run {run} row {i}" for i in range(300)]
        expected.update(bodies)
        frame = spark.createDataFrame([(b,) for b in bodies], "body string").repartition(2)
        options = {"topic": topic, "producerGroup": group, "sendTimeoutMs": timeout_ms, "retries": retries}
        if transactional:
            options |= {"transactional": "true", "transactionLog": str(tmp_path / "log")}
            options |= {"txnAppId": "shared", "txnVersion": str(run)}
        write(frame, two_brokers.namesrv_addr, **options)
    stored = read_topic(spark, two_brokers, topic).select("body").collect()
    assert Counter(bytes(r.body).decode() for r in stored) == expected
