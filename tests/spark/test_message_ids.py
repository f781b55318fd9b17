"""Message ids through Spark: every row of a large Arrow send has a msgId of its own."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from rocketspark import Producer
from tests.spark.cluster import SparkCluster

ROWS = 200_000


@pytest.mark.slow
def test_msg_ids_of_a_200k_row_arrow_send_are_distinct(spark: SparkSession, two_brokers: SparkCluster) -> None:
    topic = "ArrowMsgIds"
    two_brokers.create_topic(topic)
    table = pa.table({"body": [f"row {i}".encode() for i in range(ROWS)]})
    with Producer(f"{topic}_producer", namesrv_addr=two_brokers.namesrv_addr) as producer:
        results = producer.send_arrow(table, topic)
    assert sum(r.count for r in results) == ROWS
    frame = spark.read.format("rocketmq").option("nameserver", two_brokers.namesrv_addr).option("topic", topic).load()
    counts = frame.agg(F.count("*").alias("rows"), F.countDistinct("msgId").alias("ids")).collect()[0]
    assert (counts["rows"], counts["ids"]) == (ROWS, ROWS)
