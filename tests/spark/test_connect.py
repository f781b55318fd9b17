"""format("rocketmq") from a Spark Connect client: `SparkSession.builder.remote("local[2]")` starts a
local Connect server (shipped with PySpark) and talks to it over gRPC, as a client of a shared or
serverless cluster does. The client runs in a subprocess of its own: the test run's classic
SparkSession stays the only session of this process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spark.cluster import SparkCluster
from tests.spark.queries import run_python_with_spark

#: the README's first stream, then a batch write and a batch read, then a streaming write (availableNow),
#: through a Connect session
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
    again = spark.readStream.format("rocketmq").option("nameserver", namesrv).option("topic", "FirstStream")
    again = again.option("consumerGroup", "connect_stream_write").option("startingOffsets", "earliest").load()
    sink = again.select("body", F.lit("streamed").alias("tags")).writeStream.format("rocketmq")
    sink = sink.option("nameserver", namesrv).option("topic", "ConnectStreamed")
    sink = sink.option("checkpointLocation", sys.argv[2]).trigger(availableNow=True).start()
    sink.awaitTermination(120)
    streamed = spark.read.format("rocketmq").option("nameserver", namesrv).option("topic", "ConnectStreamed").load()
    print("stream written", streamed.filter(F.col("tags") == "streamed").count())
finally:
    spark.stop()
"""


@pytest.mark.slow
@pytest.mark.timeout(330)  # a Connect server of its own starts and stops in the subprocess
def test_the_readmes_first_stream_batch_io_and_a_stream_write_through_a_spark_connect_session(
    two_brokers: SparkCluster, tmp_path: Path
) -> None:
    two_brokers.create_topic("FirstStream", queues=2)
    two_brokers.create_topic("ConnectWritten", queues=2)
    two_brokers.create_topic("ConnectStreamed", queues=2)
    checkpoint = str(tmp_path / "stream-write-checkpoint")
    finished = run_python_with_spark(CONNECT_CLIENT, two_brokers.namesrv_addr, checkpoint, cwd=tmp_path, timeout_s=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "connect session pyspark.sql.connect.session" in finished.stdout
    assert "streamed 10" in finished.stdout
    assert "read back 20" in finished.stdout
    assert "stream written 10" in finished.stdout
