"""format("rocketmq") from a Spark Connect client: `SparkSession.builder.remote("local[2]")` starts a
local Connect server (shipped with PySpark) and talks to it over gRPC, as a client of a shared or
serverless cluster does. The client runs in a subprocess of its own: the test run's classic
SparkSession stays the only session of this process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spark.cluster import SparkCluster
from tests.spark.queries import run_python_with_spark

#: the README's first stream, then a batch write and a batch read, through a Connect session
CONNECT_CLIENT = r"""
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from rocketspark import Message, Producer

namesrv = sys.argv[1]
with Producer("first-producer", namesrv_addr=namesrv) as producer:
    producer.send_batch([Message("FirstStream", f"event {i}".encode(), tags="demo") for i in range(10)])
spark = SparkSession.builder.remote("local[2]").config("spark.sql.session.timeZone", "UTC").getOrCreate()
try:
    print("connect session", type(spark).__module__)
    events = spark.readStream.format("rocketmq").option("nameserver", namesrv).option("topic", "FirstStream")
    events = events.option("consumerGroup", "first_stream").option("startingOffsets", "earliest").load()
    query = events.writeStream.format("memory").queryName("events").trigger(availableNow=True).start()
    query.awaitTermination(120)
    spark.table("events").selectExpr("queueId", "queueOffset", "CAST(body AS STRING)").show()
    print("streamed", spark.table("events").count())
    written = spark.range(20).select(
        F.concat(F.lit("written "), F.col("id").cast("string")).alias("body"), F.lit("connect").alias("tags")
    )
    written.write.format("rocketmq").option("nameserver", namesrv).option("topic", "ConnectWritten").mode(
        "append"
    ).save()
    back = spark.read.format("rocketmq").option("nameserver", namesrv).option("topic", "ConnectWritten").load()
    print("read back", back.filter(F.col("tags") == "connect").count())
finally:
    spark.stop()
"""


@pytest.mark.slow
@pytest.mark.timeout(330)  # a Connect server of its own starts and stops in the subprocess
def test_the_readmes_first_stream_and_batch_io_through_a_spark_connect_session(
    two_brokers: SparkCluster, tmp_path: Path
) -> None:
    two_brokers.create_topic("FirstStream", queues=2)
    two_brokers.create_topic("ConnectWritten", queues=2)
    finished = run_python_with_spark(CONNECT_CLIENT, two_brokers.namesrv_addr, cwd=tmp_path, timeout_s=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "connect session pyspark.sql.connect.session" in finished.stdout
    assert "streamed 10" in finished.stdout
    assert "read back 20" in finished.stdout
