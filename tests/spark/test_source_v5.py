"""The Spark source reads what the official RocketMQ 5.x Python client sent over gRPC (issue 43)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from tests.harness import ServerFactory
from tests.interop.v5.driver import V5Client, V5Message
from tests.interop.v5.servers import grpc_broker


def test_batch_read_of_5x_sent_messages(spark: SparkSession, servers: ServerFactory, tmp_path: Path) -> None:
    namesrv = servers.namesrv()
    _, endpoint = grpc_broker(servers, namesrv.address)
    with V5Client(tmp_path / "v5-home") as v5:
        producer = v5.producer(endpoint, topics=["v5_spark"])
        sent = [producer.send(V5Message("v5_spark", f"row-{i}", tag="T", keys=[f"k{i}"])) for i in range(3)]
        producer.shutdown()
    frame = spark.read.format("rocketmq").option("nameserver", namesrv.address).option("topic", "v5_spark").load()
    rows = sorted(frame.select("msgId", "body", "tags", "keys").collect(), key=lambda row: bytes(row.body))
    assert [bytes(row.body).decode() for row in rows] == ["row-0", "row-1", "row-2"]
    assert [row.msgId for row in rows] == [receipt.message_id for receipt in sent]
    assert [(row.tags, row.keys) for row in rows] == [("T", f"k{i}") for i in range(3)]
