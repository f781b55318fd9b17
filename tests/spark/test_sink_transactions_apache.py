"""Transactional writes on Apache's semantics (brokers with `flavor=apache`: every END stored, open half
messages checked through copies) with checks every second, and the order of rows within a queue on
both flavors. docs/spark.md, "Transactions"."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from rocketspark.message.properties import codec as props
from rocketspark.message.validation import TRANS_HALF_TOPIC
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import pull_all
from tests.spark.cluster import SparkCluster, two_brokers_on
from tests.spark.queries import QUERY_TIMEOUT_S, forget_last_commit, rows_reach_the_sink_as_made, stream, wait_for
from tests.spark.test_exactly_once import finish
from tests.spark.test_sink_brokers import fill
from tests.spark.test_sink_transactions import (
    BROKER_SETTINGS,
    Reader,
    committed_attempts_only,
    group_member,
    half_messages,
    visible,
)

#: Apache's check every second, half messages open a second checked; no move to the check-max topic
APACHE_SETTINGS = tuple(
    arg
    for setting in (
        "flavor=apache",
        "transactionTimeOut=1000",
        "transactionCheckInterval=1000",
        "transactionCheckMax=1000",
        "waitTimeMillsInSendQueue=5000",
    )
    for arg in ("--set", setting)
)


@pytest.fixture(scope="module")
def apache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    factory = ServerFactory(tmp_path_factory.mktemp("apache-transactions-cluster"))
    try:
        yield two_brokers_on(factory, *APACHE_SETTINGS)
    finally:
        factory.stop_all()


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    factory = ServerFactory(tmp_path_factory.mktemp("bundled-transactions-cluster"))
    try:
        yield two_brokers_on(factory, *BROKER_SETTINGS)
    finally:
        factory.stop_all()


def half_queue_settled(cluster: SparkCluster) -> Callable[[], bool]:
    """A condition that holds once no half message was stored for three check rounds: each round
    writes back a copy of every half message still open, so none is open any more."""
    seen = [-1, time.monotonic()]

    def settled() -> bool:
        count = half_messages(cluster)
        if count != seen[0]:
            seen[:] = [count, time.monotonic()]
        return time.monotonic() - seen[1] > 3.0

    return settled


def copies_while_sending(cluster: SparkCluster, topic: str) -> int:
    """Copies of half messages of `topic` that the brokers' checks wrote back before the last one
    was sent: while a task was still sending (a half message is copied once it is open for
    transactionTimeOut, or from the start with check immunity)."""

    async def pull() -> int:
        client = RemotingClient()
        try:
            found = 0
            for broker in cluster.brokers.values():
                halves = await pull_all(client, broker.address, TRANS_HALF_TOPIC, 0)
                ours = [m for m in halves if m.properties.get(props.REAL_TOPIC) == topic]
                copies = [m for m in ours if props.TRANSACTION_CHECK_TIMES in m.properties]
                last_sent = max(m.born_timestamp for m in ours if props.TRANSACTION_CHECK_TIMES not in m.properties)
                found += sum(1 for m in copies if m.store_timestamp < last_sent)
            return found
        finally:
            await client.close()

    return asyncio.run(pull())


#: rows of the copy test: one task, 10 s of the slow UDF (ten check rounds while it sends)
ROWS_OPEN = 40


@pytest.mark.slow
@pytest.mark.timeout(3 * QUERY_TIMEOUT_S + 120)
@pytest.mark.parametrize("max_open", ["0", "3"])
def test_batches_open_longer_than_the_check_timeout_write_every_row_once_on_apache(
    spark: SparkSession, apache: SparkCluster, tmp_path: Path, max_open: str
) -> None:
    """A slow UDF keeps a batch's half messages open for seconds: Apache's check writes them back
    and asks about the copies while the batch is open (UNKNOWN, no record yet; with
    transactionMaxOpenSeconds=3 only once that passed) and after the commit (ROLLBACK: the driver's
    ENDs stored every row). The batch replayed, committed before, ends nothing again."""
    source, target = f"TxApIn{max_open}", f"TxApOut{max_open}"
    apache.create_topic(source, queues=2, on=("broker-a",))
    apache.create_topic(target)
    bodies = fill(apache, source, ROWS_OPEN)  # one queue: one task, one batch

    @F.udf("string")
    def slow(body: str) -> str:
        time.sleep(0.25)  # 10 s a task; a half message sent every 5 rows: most stay open for seconds
        return body

    halves_before = half_messages(apache)
    checkpoint = tmp_path / "ckpt"

    def run(body: Column) -> None:
        frame = stream(spark, apache, source, f"{source}_copier", startingOffsets="earliest")
        writer = frame.select(body.alias("body")).writeStream.format("rocketmq").option("topic", target)
        writer = writer.option("nameserver", apache.namesrv_addr).option("checkpointLocation", str(checkpoint))
        writer = writer.option("transactional", "true").option("transactionMaxOpenSeconds", max_open)
        finish(writer.trigger(availableNow=True).start())

    with rows_reach_the_sink_as_made(spark, 5):
        run(slow(F.col("body").cast("string")))
    assert visible(apache, target) == Counter(bodies)
    # copies were written back while the batch was open, its task still sending (50 and 70 in two
    # runs here; with a task of 4 s, 0 to 10 of 40 once, as the checks' rounds fell)
    assert copies_while_sending(apache, target) > 0
    assert half_messages(apache) > halves_before + len(bodies)
    assert forget_last_commit(checkpoint) == 0  # the batch replayed, as after a driver that died
    run(F.col("body").cast("string"))
    with group_member(apache, target):  # answers the later rounds' checks of the copies
        wait_for(half_queue_settled(apache), "no half message open", 60)
    assert visible(apache, target) == Counter(bodies)


@pytest.mark.slow
@pytest.mark.timeout(3 * QUERY_TIMEOUT_S + 120)
def test_a_failed_task_leaves_nothing_visible_and_the_rerun_writes_every_row_once_on_apache(
    spark: SparkSession, apache: SparkCluster, tmp_path: Path
) -> None:
    """A task fails after sending half messages (the query fails), the query runs again: its rows
    appear once, none of the failed attempt's, while the brokers check copies of both."""
    apache.create_topic("TxApFailIn", queues=2, on=("broker-a",))
    apache.create_topic("TxApFailOut")
    bodies = fill(apache, "TxApFailIn", 1_000)
    marker = str(tmp_path / "failed-once")
    doomed = bodies[300]

    @F.udf("string")
    def fails_once(body: str) -> str:
        time.sleep(0.004)  # 500 rows a task: 2 s, past transactionTimeOut
        if body == doomed and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("the first attempt of this task fails here")
        return body

    reader = Reader(apache, "TxApFailOut")
    reader.start()
    frame = stream(spark, apache, "TxApFailIn", "TxApFail_copier", startingOffsets="earliest")
    writer = frame.select(fails_once(F.col("body").cast("string")).alias("body")).writeStream.format("rocketmq")
    writer = writer.option("nameserver", apache.namesrv_addr).option("topic", "TxApFailOut")
    writer = writer.option("transactional", "true").option("checkpointLocation", str(tmp_path / "ckpt"))
    writer = writer.option("transactionMaxOpenSeconds", "0")
    halves_before = half_messages(apache)
    try:
        with rows_reach_the_sink_as_made(spark, 50):  # the task sends rows before it fails
            query = writer.trigger(availableNow=True).start()
            with pytest.raises(Exception, match="first attempt of this task fails"):
                query.awaitTermination(QUERY_TIMEOUT_S)
        assert half_messages(apache) > halves_before  # the failed attempt's half messages
        finish(writer.trigger(availableNow=True).start())
        with group_member(apache, "TxApFailOut"):  # answers the checks of stray copies
            wait_for(half_queue_settled(apache), "no half message open", 60)
    finally:
        reader.stopping.set()
        reader.join(30)
    committed_attempts_only(reader)
    assert Counter(reader.bodies) == Counter(bodies)
    assert visible(apache, "TxApFailOut") == Counter(bodies)


ROWS = 20_000
QUEUES = 2


def queue_ids(cluster: SparkCluster, topic: str) -> dict[int, list[int]]:
    """The row ids in each queue of broker-a, in the queue's order."""

    async def pull() -> dict[int, list[int]]:
        client = RemotingClient()
        try:
            broker = cluster.brokers["broker-a"].address
            return {
                queue_id: [int(m.body) for m in await pull_all(client, broker, topic, queue_id)]
                for queue_id in range(QUEUES)
            }
        finally:
            await client.close()

    return asyncio.run(pull())


@pytest.mark.slow
@pytest.mark.timeout(2 * QUERY_TIMEOUT_S + 120)
@pytest.mark.parametrize("flavor", ["rocketspark", "apache"])
def test_rows_of_one_queue_appear_in_the_order_of_their_partition(
    spark: SparkSession, request: pytest.FixtureRequest, tmp_path: Path, flavor: str
) -> None:
    """20,000 rows, two Spark partitions of contiguous ids, each row to queue id % 2: 10,000 rows a
    queue; in each queue the rows of each partition come in the partition's order."""
    cluster: SparkCluster = request.getfixturevalue("apache" if flavor == "apache" else "bundled")
    topic = f"TxOrder{flavor}"
    cluster.create_topic(topic, queues=QUEUES, on=("broker-a",))
    frame = spark.range(0, ROWS, numPartitions=2).select(
        F.col("id").cast("string").alias("body"),
        F.lit(topic).alias("topic"),
        (F.col("id") % QUEUES).cast("int").alias("queueId"),
    )
    writer = frame.write.format("rocketmq").option("nameserver", cluster.namesrv_addr)
    writer = writer.option("transactional", "true").option("transactionLog", str(tmp_path / "log"))
    writer = writer.option("transactionMaxOpenSeconds", "30")  # Apache rewrites immune half messages each round
    writer.option("txnAppId", "order").option("txnVersion", "1").mode("append").save()
    stored = queue_ids(cluster, topic)
    assert sorted(stored[0] + stored[1]) == list(range(ROWS))  # every row once
    for queue_id, ids in stored.items():
        assert len(ids) == ROWS // QUEUES
        for low, high in ((0, ROWS // 2), (ROWS // 2, ROWS)):  # each partition's ids
            of_partition = [i for i in ids if low <= i < high]
            assert of_partition == sorted(of_partition), f"queue {queue_id}: rows of a partition out of order"
