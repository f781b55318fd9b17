"""Transactional writes (`transactional=true`): tasks send half messages, the driver's commit makes
a batch visible. The brokers' duplicate window is off (but in one variant of the stopped query):
exactly once rests on the transactions alone."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from rocketspark.client.api import admin
from rocketspark.client.api.offset import get_max_offset
from rocketspark.client.config import ClientConfig
from rocketspark.client.producer.transaction import AsyncTransactionProducer
from rocketspark.client.sync import LitePullConsumer, shared_loop
from rocketspark.message.validation import TRANS_HALF_TOPIC
from rocketspark.protocol.body.heartbeat import ConsumeFromWhere
from rocketspark.remoting.client import RemotingClient
from rocketspark.spark.sink.options import DEFAULT_TRANSACTIONAL_GROUP
from rocketspark.spark.sink.transactional.listener import RecordListener
from rocketspark.spark.sink.transactional.record import ATTEMPT_PROPERTY, RECORD_PROPERTY, load
from tests.harness import ServerFactory
from tests.integration.broker_client import pull_all
from tests.spark.cluster import SparkCluster, two_brokers_on
from tests.spark.queries import QUERY_TIMEOUT_S, forget_last_commit, rows_reach_the_sink_as_made, stream, wait_for
from tests.spark.test_exactly_once import finish, start_copy
from tests.spark.test_sink_brokers import fill

CHECKS = tuple(
    arg
    for setting in (
        "transactionTimeOut=1000",
        "transactionCheckInterval=1000",
        "transactionCheckMax=1000",
        "waitTimeMillsInSendQueue=5000",
    )
    for arg in ("--set", setting)
)
BROKER_SETTINGS = ("--set", "duplicateWindowSeconds=0", *CHECKS)
#: half messages the brokers check after 3 s (transactionMaxOpenSeconds, 60 by default): the tests
#: that wait for the check to roll back a lost attempt's half messages
STRAYS_CHECKED_AFTER_S = "3"
STRAYS_CHECKED = {"transactional": "true", "transactionMaxOpenSeconds": STRAYS_CHECKED_AFTER_S}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    factory = ServerFactory(tmp_path_factory.mktemp("transactions-cluster"))
    try:
        yield two_brokers_on(factory, *BROKER_SETTINGS)
    finally:
        factory.stop_all()


class Reader(threading.Thread):
    """Consumes `topic` while the query writes; records every message, and any seen before its
    batch's record existed (before the driver's commit began)."""

    def __init__(self, cluster: SparkCluster, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = LitePullConsumer(
            f"{topic}_reader",
            namesrv_addr=cluster.namesrv_addr,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        )
        self.topic = topic
        self.bodies: list[str] = []
        self.early: list[str] = []
        self.attempts: dict[str, set[str]] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        self.consumer.start()
        self.consumer.subscribe(self.topic)
        try:
            while not self.stopping.is_set():
                for message in self.consumer.poll(200):
                    path = message.properties[RECORD_PROPERTY]
                    if not os.path.exists(path):
                        self.early.append(message.body.decode())
                    self.bodies.append(message.body.decode())
                    self.attempts.setdefault(path, set()).add(message.properties[ATTEMPT_PROPERTY])
        finally:
            self.consumer.shutdown()


def every_half_message_ended(cluster: SparkCluster) -> bool:
    """No broker holds a half message not ended (GET_BROKER_RUNTIME_INFO's `transactionHalfMessages`;
    a range end stores one end record for many half messages)."""

    async def ask() -> bool:
        client = RemotingClient()
        try:
            for broker in cluster.brokers.values():
                waiting = orjson.loads(
                    (await admin.get_runtime_info(client, broker.address))["transactionHalfMessages"]
                )
                if any(waiting.values()):
                    return False
            return True
        finally:
            await client.close()

    return asyncio.run(ask())


def committed_attempts_only(reader: Reader) -> None:
    """Every visible row comes from an attempt its batch record commits."""
    for path, attempts in reader.attempts.items():
        record = load(path)
        assert record is not None and record.commits, path
        assert attempts <= record.attempts, f"rows of attempts {attempts - record.attempts} of {path} are visible"


@pytest.mark.slow
@pytest.mark.timeout(3 * QUERY_TIMEOUT_S + 120)
def test_a_consumer_sees_a_batch_only_once_spark_commits_it_and_a_replay_adds_nothing(
    spark: SparkSession, cluster: SparkCluster, tmp_path: Path
) -> None:
    cluster.create_topic("TxStreamIn", queues=2, on=("broker-a",))
    cluster.create_topic("TxStreamOut")
    bodies = fill(cluster, "TxStreamIn", 3_000)
    reader = Reader(cluster, "TxStreamOut")
    reader.start()
    checkpoint = tmp_path / "ckpt"
    try:
        finish(start_copy(spark, cluster, "TxStreamIn", "TxStreamOut", checkpoint, 1_000, transactional="true"))
        wait_for(lambda: len(reader.bodies) >= len(bodies), "the reader has every row", 60)
        # the last batch replayed, as after a driver that died between its commit and Spark's
        assert forget_last_commit(checkpoint) >= 1
        finish(start_copy(spark, cluster, "TxStreamIn", "TxStreamOut", checkpoint, 1_000, transactional="true"))
        with group_member(cluster, "TxStreamOut"):
            wait_for(lambda: every_half_message_ended(cluster), "every half message ended", 60)
    finally:
        reader.stopping.set()
        reader.join(30)
    assert reader.early == []
    assert len(reader.attempts) >= 3  # three batches, one record each
    committed_attempts_only(reader)
    assert Counter(reader.bodies) == Counter(bodies)
    assert visible(cluster, "TxStreamOut") == Counter(bodies)


@pytest.mark.slow
@pytest.mark.timeout(3 * QUERY_TIMEOUT_S + 120)
def test_a_failed_task_leaves_nothing_visible_and_the_rerun_writes_every_row_once(
    spark: SparkSession, cluster: SparkCluster, tmp_path: Path
) -> None:
    cluster.create_topic("TxFailIn", queues=2, on=("broker-a",))
    cluster.create_topic("TxFailOut")
    bodies = fill(cluster, "TxFailIn", 2_000)
    marker = str(tmp_path / "failed-once")
    doomed = bodies[600]

    @F.udf("string")
    def fails_once(body: str) -> str:
        if body == doomed and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("the first attempt of this task fails here")
        return body

    reader = Reader(cluster, "TxFailOut")
    reader.start()
    checkpoint = tmp_path / "ckpt"
    frame = stream(spark, cluster, "TxFailIn", "TxFail_copier", startingOffsets="earliest")
    writer = frame.select(fails_once(F.col("body").cast("string")).alias("body")).writeStream.format("rocketmq")
    writer = writer.option("nameserver", cluster.namesrv_addr).option("topic", "TxFailOut")
    writer = writer.option("transactional", "true").option("checkpointLocation", str(checkpoint))
    writer = writer.option("transactionMaxOpenSeconds", STRAYS_CHECKED_AFTER_S)
    halves_before = half_messages(cluster)
    try:
        with rows_reach_the_sink_as_made(spark, 50):  # the task sends rows before it fails
            query = writer.trigger(availableNow=True).start()
            with pytest.raises(Exception, match="first attempt of this task fails"):
                query.awaitTermination(QUERY_TIMEOUT_S)
        assert os.path.exists(marker)
        assert half_messages(cluster) > halves_before  # the failed attempt's half messages
        finish(writer.trigger(availableNow=True).start())
        wait_for(lambda: len(reader.bodies) >= len(bodies), "the reader has every row", 60)
        # the failed attempts' half messages: rolled back by their task, by abort, or by the check
        # once the batch's record names the attempts that commit
        with group_member(cluster, "TxFailOut"):
            wait_for(lambda: every_half_message_ended(cluster), "every half message ended", 60)
    finally:
        reader.stopping.set()
        reader.join(30)
    committed_attempts_only(reader)
    assert Counter(reader.bodies) == Counter(bodies)


@pytest.mark.slow
@pytest.mark.timeout(3 * QUERY_TIMEOUT_S + 120)
@pytest.mark.parametrize("window", ["off", "on"])
def test_a_query_stopped_between_its_sends_and_its_commit_writes_every_row_once_after_the_restart(
    spark: SparkSession, cluster: SparkCluster, servers: ServerFactory, tmp_path: Path, window: str
) -> None:
    """With the duplicate window off (the module's brokers) and on (brokers of the test's own)."""
    if window == "on":
        cluster = two_brokers_on(servers, *CHECKS)
    cluster.create_topic("TxStopIn", queues=2, on=("broker-a",))
    cluster.create_topic("TxStopOut")
    bodies = fill(cluster, "TxStopIn", 2_000)
    checkpoint = tmp_path / "ckpt"
    halves_before = half_messages(cluster)
    query = start_copy(spark, cluster, "TxStopIn", "TxStopOut", checkpoint, 2_000, **STRAYS_CHECKED)
    # the driver goes away before it ends anything: its commit cannot begin, as the directory of the
    # query's batch records is a file (made before the tasks have sent their 2,000 rows)
    records = checkpoint / "rocketmq-transactions" / query.id
    records.parent.mkdir(parents=True, exist_ok=True)
    records.write_bytes(b"")
    try:
        wait_for(lambda: half_messages(cluster) > halves_before, "the first half messages", 120)
        with pytest.raises(StreamingQueryException):  # its commit failed before it ended anything
            query.awaitTermination(QUERY_TIMEOUT_S)
    finally:
        query.stop()
    records.unlink()
    assert visible(cluster, "TxStopOut") == Counter()  # nothing of the batch is visible
    finish(start_copy(spark, cluster, "TxStopIn", "TxStopOut", checkpoint, 2_000, **STRAYS_CHECKED))
    assert visible(cluster, "TxStopOut") == Counter(bodies)
    # the check reaches a member of the group while one is online (a running query's executors); the
    # finished query's Python workers may be gone, so this test keeps one: the sink's own listener
    with group_member(cluster, "TxStopOut"):
        wait_for(lambda: every_half_message_ended(cluster), "the stopped attempt's half messages rolled back", 60)
    assert visible(cluster, "TxStopOut") == Counter(bodies)


@contextlib.contextmanager
def group_member(cluster: SparkCluster, topic: str) -> Iterator[None]:
    """A producer of the sink's group that answers checks from the batch records, as the driver's does."""
    config = ClientConfig(
        namesrv_addr=cluster.namesrv_addr,
        instance_name="test-group-member",
        heartbeat_broker_interval_ms=200,
        poll_name_server_interval_ms=200,
    )
    member = AsyncTransactionProducer(DEFAULT_TRANSACTIONAL_GROUP, RecordListener(), client_config=config)
    shared_loop().run(member.start(), 30)
    try:
        shared_loop().run(member.fetch_publish_queues(topic), 30)  # its brokers get its heartbeats
        yield
    finally:
        shared_loop().run(member.shutdown(), 30)


def visible(cluster: SparkCluster, topic: str, queues: int = 4) -> Counter[str]:
    """The bodies a consumer finds in `topic` (`queues` queues on each broker)."""

    async def pull() -> Counter[str]:
        client = RemotingClient()
        try:
            found: Counter[str] = Counter()
            for broker in cluster.brokers.values():
                for queue_id in range(queues):
                    found.update(m.body.decode() for m in await pull_all(client, broker.address, topic, queue_id))
            return found
        finally:
            await client.close()

    return asyncio.run(pull())


def half_messages(cluster: SparkCluster) -> int:
    async def ask() -> int:
        client = RemotingClient()
        try:
            return sum([await get_max_offset(client, b.address, TRANS_HALF_TOPIC, 0) for b in cluster.brokers.values()])
        finally:
            await client.close()

    return asyncio.run(ask())


@pytest.mark.slow
def test_a_transactional_batch_write_commits_every_row_once(
    spark: SparkSession, cluster: SparkCluster, tmp_path: Path
) -> None:
    cluster.create_topic("TxBatchOut")
    bodies = [f"batch row {i}" for i in range(500)]
    frame = spark.createDataFrame([(b,) for b in bodies], "body string").repartition(3)
    writer = frame.write.format("rocketmq").option("nameserver", cluster.namesrv_addr).option("topic", "TxBatchOut")
    writer = writer.option("transactional", "true").option("transactionLog", str(tmp_path / "log"))
    writer.option("txnAppId", "nightly").option("txnVersion", "1").mode("append").save()
    assert visible(cluster, "TxBatchOut") == Counter(bodies)
    record = load(str(tmp_path / "log" / "txn-nightly-1.json"))
    assert record is not None and record.state.value == "committed"
    assert sum(span.count for span in record.ranges) == len(bodies)


def test_a_transactional_batch_write_needs_txn_app_id(
    spark: SparkSession, cluster: SparkCluster, tmp_path: Path
) -> None:
    frame = spark.createDataFrame([("row",)], "body string")
    writer = frame.write.format("rocketmq").option("nameserver", cluster.namesrv_addr).option("topic", "TxNoAppId")
    writer = writer.option("transactional", "true").option("transactionLog", str(tmp_path / "log"))
    with pytest.raises(Exception, match="transactional=true needs the options txnAppId and txnVersion"):
        writer.mode("append").save()


@pytest.mark.slow
def test_a_record_that_cannot_be_read_fails_the_commit_and_ends_nothing(
    spark: SparkSession, cluster: SparkCluster, tmp_path: Path
) -> None:
    cluster.create_topic("TxBadRecord")
    record = tmp_path / "log" / "txn-bad-1.json"
    record.parent.mkdir(parents=True)
    record.write_text("{not json")  # damaged: whether this batch committed before is not known
    frame = spark.createDataFrame([(f"row {i}",) for i in range(50)], "body string")
    writer = frame.write.format("rocketmq").option("nameserver", cluster.namesrv_addr).option("topic", "TxBadRecord")
    writer = writer.option("transactional", "true").option("transactionLog", str(tmp_path / "log"))
    with pytest.raises(Exception, match=f"transaction record {record} cannot be read"):
        writer.option("txnAppId", "bad").option("txnVersion", "1").mode("append").save()
    assert record.read_text() == "{not json"
    assert visible(cluster, "TxBadRecord") == Counter()
