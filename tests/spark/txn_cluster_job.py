"""A Spark job for tests/spark/test_sink_transactions_cluster.py, run in its own process (one SparkContext).

On master `local-cluster[2,1,1024]` whose executors' Python workers cannot see the driver's
transaction log: they run through PYTHON_WRAPPER, which gives each a mount namespace of its own
with an empty file system mounted over the log's directory (HIDDEN_DIR, set for the executors only
with `spark.executorEnv`). Then:

1. half messages as a task attempt that died would have left them (sent as an executor's producer
   sends, for the driver's group, naming the batch write's record) go to the brokers;
2. a transactional batch write (`txnAppId`) of BATCH_ROWS rows commits, its executors never
   reading its record;
3. a transactional streaming query (`availableNow`) copies SOURCE into its sink topic, its record
   in the default place: `<checkpointLocation>/rocketmq-transactions` of a `file:` URI checkpoint.

4. the job waits (while the driver's Python workers live) until BROKER_A holds no open half
   message: the stray ones rolled back by the driver's answers to the brokers' checks.

A UDF on the executors reports what they see of the log's directories, and the job whether every
executor Python process is in a mount namespace of its own. The last stdout line is `RESULT <json>`.

    python tests/spark/txn_cluster_job.py NAMESRV BROKER_A SOURCE BATCH_TOPIC STREAM_TOPIC DIRECTORY PYTHON_WRAPPER
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path

from pyspark.sql import functions as F

from rocketspark.client.api import admin
from rocketspark.client.producer.transaction import AsyncTransactionProducer, TransactionStatus
from rocketspark.client.sync import shared_loop
from rocketspark.message.message import Message
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.client import RemotingClient
from rocketspark.spark.session import local_session
from rocketspark.spark.sink.options import DEFAULT_TRANSACTIONAL_GROUP
from rocketspark.spark.sink.transactional.listener import TASK_GROUP_SUFFIX
from rocketspark.spark.sink.transactional.options import CHECKPOINT_DIRECTORY
from rocketspark.spark.sink.transactional.record import ATTEMPT_PROPERTY, RECORD_PROPERTY
from tests.spark.cluster_job import EXECUTORS, _owner, wait_for_executors

MASTER = "local-cluster[2,1,1024]"
TIMEOUT_S = 200
BATCH_ROWS = 4_000
STRAYS = 20
#: the stray half messages are checked this long after their birth (their CHECK_IMMUNITY_TIME_IN_SECONDS)
STRAYS_CHECKED_AFTER_S = 2
#: the environment variable naming the directory an executor's Python workers must not see
HIDDEN_DIR = "RS_TEST_HIDDEN_DIR"


class _Unasked:
    def execute_local_transaction(self, message: Message, arg: object) -> TransactionStatus:
        return TransactionStatus.UNKNOWN

    def check_local_transaction(self, message: object) -> TransactionStatus:
        return TransactionStatus.UNKNOWN


def send_strays(namesrv: str, broker: str, topic: str, record_path: str) -> None:
    """Half messages of an attempt no commit lists, as a task that died after sending them leaves them."""
    producer = AsyncTransactionProducer(
        DEFAULT_TRANSACTIONAL_GROUP + TASK_GROUP_SUFFIX,
        _Unasked(),
        check_group=DEFAULT_TRANSACTIONAL_GROUP,
        namesrv_addr=namesrv,
    )
    loop = shared_loop()
    loop.run(producer.start(), 30)
    try:
        attempt = uuid.uuid4().hex
        extra = {RECORD_PROPERTY: record_path, ATTEMPT_PROPERTY: attempt}
        extra["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(STRAYS_CHECKED_AFTER_S)
        for i in range(STRAYS):
            message = Message(topic, f"stray {i}".encode(), properties=extra)
            loop.run(producer.send_half(message, queue=MessageQueue(topic, broker, i % 4)), 30)
    finally:
        loop.run(producer.shutdown(), 30)


def executor_pythons() -> list[dict[str, object]]:
    """The Python processes of the executor JVMs: whether each shares this driver's mount namespace."""
    mine = os.readlink("/proc/self/ns/mnt")
    found: list[dict[str, object]] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
            owner = _owner(int(proc.name), os.getpid())
            namespace = os.readlink(proc / "ns" / "mnt")
        except OSError:  # gone meanwhile
            continue
        if b"pyspark.daemon" in command and owner not in ("driver", "other"):  # the daemon and its workers
            found.append({"pid": int(proc.name), "executor": owner, "sharesDriverMounts": namespace == mine})
    return found


async def _open_halves(broker_addr: str) -> int:
    client = RemotingClient()
    try:
        info = await admin.get_runtime_info(client, broker_addr)
        return sum(json.loads(info["transactionHalfMessages"]).values())
    finally:
        await client.close()


def strays_left(broker_addr: str, timeout_s: float) -> int:
    """Open half messages on the broker, once none is left or after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while (left := asyncio.run(_open_halves(broker_addr))) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def main(
    namesrv: str, broker_a: str, source: str, batch_topic: str, stream_topic: str, directory: str, wrapper: str
) -> int:
    started = time.monotonic()
    checkpoint = Path(directory) / "checkpoint"
    log_dir = checkpoint / CHECKPOINT_DIRECTORY
    batch_log = Path(directory) / "batch-log"
    for hidden in (log_dir, batch_log):
        hidden.mkdir(parents=True)  # mount points for the executors' empty file systems
    os.environ["PYSPARK_PYTHON"] = wrapper
    spark = local_session(
        "rocketspark-transactions-cluster-test",
        master=MASTER,
        **{
            "spark.driver.host": "127.0.0.1",
            "spark.executorEnv.PYSPARK_PYTHON": wrapper,
            "spark.executorEnv.SPARK_LOCAL_IP": "127.0.0.1",
            "spark.executorEnv." + HIDDEN_DIR: f"{log_dir}:{batch_log}",
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        },
    )
    try:
        wait_for_executors(spark, EXECUTORS, 120.0)

        @F.udf("string")
        def seen_by_executor(_: int) -> str:
            return json.dumps({str(p): sorted(os.listdir(p)) for p in (log_dir, batch_log)})

        record_path = str(batch_log / "txn-cluster-1.json")
        send_strays(namesrv, "broker-a", batch_topic, record_path)
        rows = spark.range(BATCH_ROWS, numPartitions=4).select(
            F.concat(F.lit("row "), F.col("id").cast("string")).cast("binary").alias("body")
        )
        (
            rows.write.format("rocketmq")
            .option("nameserver", namesrv)
            .option("topic", batch_topic)
            .option("transactional", "true")
            .option("transactionLog", f"file://{batch_log}")
            .option("txnAppId", "cluster")
            .option("txnVersion", "1")
            .option("transactionMaxOpenSeconds", str(STRAYS_CHECKED_AFTER_S))
            .mode("append")
            .save()
        )
        frame = (
            spark.readStream.format("rocketmq")
            .option("nameserver", namesrv)
            .option("topic", source)
            .option("consumerGroup", "txn_cluster_test")
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", "1000")
            .load()
        )
        query = (
            frame.select("body")
            .writeStream.format("rocketmq")
            .option("nameserver", namesrv)
            .option("topic", stream_topic)
            .option("transactional", "true")
            .option("checkpointLocation", f"file://{checkpoint}")
            .trigger(availableNow=True)
            .start()
        )
        if not query.awaitTermination(TIMEOUT_S):
            query.stop()
            print(f"the query did not finish in {TIMEOUT_S} s", file=sys.stderr)
            return 1
        seen = spark.range(2, numPartitions=2).select(seen_by_executor(F.col("id")).alias("seen")).collect()
        pythons = executor_pythons()
        left = strays_left(broker_a, 60.0)
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        result = {
            "seconds": round(time.monotonic() - started, 1),
            "streamBatches": len(progress),
            "streamRows": sum(p["sink"]["numOutputRows"] for p in progress),
            "executorsSaw": [json.loads(row["seen"]) for row in seen],
            "executorPythons": pythons,
            "straysLeft": left,
            "driverSaw": {str(p): sorted(q.name for q in p.rglob("*.json")) for p in (log_dir, batch_log)},
        }
    finally:
        spark.stop()
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:8]))
