"""The sink's deterministic ids (idempotentWrites): real Spark writes to real brokers, read back.

Most tests write to brokers of flavor=apache (`no_dedup`), which have no duplicate window, as Apache
RocketMQ's: a replayed batch is stored twice and they can check that its rows carry the same msgIds
the second time, so consumers can deduplicate by msgId (at least once). Others write to brokers of the
default flavor with the window on (`dedup`), which store the replayed batch once."""

from __future__ import annotations

import contextlib
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from rocketspark.errors import ConfigError
from rocketspark.message.batches.producer import producer_batch
from rocketspark.spark.datasource import RocketMQDataSource
from rocketspark.spark.sink.ids import IdScope
from rocketspark.spark.sink.options import parse_sink
from tests.harness import ServerFactory
from tests.spark.cluster import SparkCluster, two_brokers_on
from tests.spark.queries import QUERY_TIMEOUT_S, forget_last_commit

ROWS_PER_BATCH = 40


@pytest.fixture(scope="module")
def no_dedup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """broker-a and broker-b of flavor=apache: no duplicate window (every copy of a message is
    stored), standard sends and pulls only."""
    factory = ServerFactory(tmp_path_factory.mktemp("no-dedup"))
    try:
        yield two_brokers_on(factory, "--set", "flavor=apache")
    finally:
        factory.stop_all()


@pytest.fixture(scope="module")
def dedup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """broker-a and broker-b that store a message whose UNIQ_KEY they stored in the last 10 minutes once."""
    factory = ServerFactory(tmp_path_factory.mktemp("dedup"))
    try:
        yield two_brokers_on(factory, "--set", "duplicateWindowSeconds=600")
    finally:
        factory.stop_all()


def read_ids(
    spark: SparkSession, cluster: SparkCluster, topic: str, queues: dict[str, set[tuple[str, int]]] | None = None
) -> dict[str, list[bytes]]:
    """The bodies stored under each msgId of the topic (and in `queues` the queues holding each)."""
    frame = spark.read.format("rocketmq").option("nameserver", cluster.namesrv_addr).option("topic", topic).load()
    stored: dict[str, list[bytes]] = defaultdict(list)
    for row in frame.select("msgId", "body", "brokerName", "queueId").collect():
        stored[row.msgId].append(bytes(row.body))
        if queues is not None:
            queues.setdefault(row.msgId, set()).add((row.brokerName, row.queueId))
    return stored


def run_rate_stream(
    spark: SparkSession,
    cluster: SparkCluster,
    topic: str,
    checkpoint: Path | None,
    *,
    sink_format: str = "rocketmq",
    query_name: str | None = None,
    **options: str,
) -> int:
    """A rate stream (bodies repeat: value % 7) into `topic` with AvailableNow; rows written. Without
    a `checkpoint` the query's checkpoint is `query_name` under spark.sql.streaming.checkpointLocation."""
    rate = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", str(ROWS_PER_BATCH))
    frame = rate.option("numPartitions", "2").load()
    frame = frame.select((F.col("value") % 7).cast("string").alias("body"), F.lit("rate").alias("tags"))
    writer = frame.writeStream.format(sink_format).option("nameserver", cluster.namesrv_addr).option("topic", topic)
    for key, value in options.items():
        writer = writer.option(key, value)
    if checkpoint is not None:
        writer = writer.option("checkpointLocation", str(checkpoint))
    if query_name is not None:
        writer = writer.queryName(query_name)
    query = writer.trigger(availableNow=True).start()
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert query.exception() is None
    return sum(p["sink"]["numOutputRows"] for p in query.recentProgress if p["numInputRows"])


def writers_in_time_zone(spark: SparkSession, zone: str) -> str:
    """The sink's format registered again under a name of its own, with `TZ=zone` in the environment
    of its Python workers (Spark starts a worker daemon for each environment); returns the name."""
    name = "rocketmq_" + re.sub(r"\W+", "_", zone).lower()

    class Zoned(RocketMQDataSource):
        @classmethod
        def name(cls) -> str:
            return name

    environment = spark.sparkContext.environment
    before = environment.get("TZ")
    environment["TZ"] = zone
    try:
        spark.dataSource.register(Zoned)
    finally:
        if before is None:
            del environment["TZ"]
        else:
            environment["TZ"] = before
    return name


@contextlib.contextmanager
def checkpoint_root(spark: SparkSession, root: Path) -> Iterator[None]:
    """Queries find their checkpoint as their name under `root` (spark.sql.streaming.checkpointLocation):
    Spark then does not pass the sink a checkpointLocation option, so it cannot read the offset log."""
    key = "spark.sql.streaming.checkpointLocation"
    spark.conf.set(key, str(root))
    try:
        yield
    finally:
        spark.conf.unset(key)


def write_batch(frame: DataFrame, cluster: SparkCluster, topic: str, **options: str) -> None:
    writer = frame.write.format("rocketmq").option("nameserver", cluster.namesrv_addr).option("topic", topic)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


@pytest.mark.slow
def test_a_replayed_batch_sends_the_same_ids(spark: SparkSession, no_dedup: SparkCluster, tmp_path: Path) -> None:
    no_dedup.create_topic("IdsReplayed")
    checkpoint = tmp_path / "ckpt"
    first = run_rate_stream(spark, no_dedup, "IdsReplayed", checkpoint)
    before = read_ids(spark, no_dedup, "IdsReplayed")
    assert first >= ROWS_PER_BATCH
    assert len(before) == first  # identical bodies in one batch and partition still get distinct ids
    assert all(len(bodies) == 1 and len(msg_id) == 32 for msg_id, bodies in before.items())
    assert all(msg_id[20:28] == "00000000" for msg_id in before)  # the time field: the start of the month

    forget_last_commit(checkpoint)
    second = run_rate_stream(spark, no_dedup, "IdsReplayed", checkpoint)
    queues: dict[str, set[tuple[str, int]]] = {}
    after = read_ids(spark, no_dedup, "IdsReplayed", queues)
    twice = {msg_id: bodies for msg_id, bodies in after.items() if len(bodies) == 2}
    assert len(twice) == ROWS_PER_BATCH  # every row of the replayed batch, under the id it had
    assert all(bodies[0] == bodies[1] for bodies in twice.values())
    assert set(twice) <= set(before)
    assert all(len(queues[msg_id]) == 1 for msg_id in twice)  # each row went to the queue it went to before
    assert len({q for msg_id in before for q in queues[msg_id]}) >= 4  # the ids spread rows over the queues
    assert sum(len(bodies) for bodies in after.values()) == first + second
    assert max(len(bodies) for bodies in after.values()) == 2


@pytest.mark.slow
def test_without_idempotent_writes_a_replay_sends_new_ids(
    spark: SparkSession, no_dedup: SparkCluster, tmp_path: Path
) -> None:
    no_dedup.create_topic("IdsRandom")
    checkpoint = tmp_path / "ckpt"
    first = run_rate_stream(spark, no_dedup, "IdsRandom", checkpoint, idempotentWrites="false")
    forget_last_commit(checkpoint)
    second = run_rate_stream(spark, no_dedup, "IdsRandom", checkpoint, idempotentWrites="false")
    after = read_ids(spark, no_dedup, "IdsRandom")
    assert second >= ROWS_PER_BATCH
    assert len(after) == first + second  # the replayed rows are there twice, each time with a new id


def test_a_batch_write_with_a_transaction_sends_the_same_ids_each_run(
    spark: SparkSession, no_dedup: SparkCluster
) -> None:
    no_dedup.create_topic("IdsTxn")
    frame = spark.range(0, 60, 1, 3).select((F.col("id") % 4).cast("string").alias("body"))
    for _ in range(2):
        write_batch(frame, no_dedup, "IdsTxn", txnAppId="nightly", txnVersion="7")
    stored = read_ids(spark, no_dedup, "IdsTxn")
    assert len(stored) == 60
    assert all(len(bodies) == 2 and bodies[0] == bodies[1] for bodies in stored.values())

    write_batch(frame, no_dedup, "IdsTxn", txnAppId="nightly", txnVersion="8")
    assert len(read_ids(spark, no_dedup, "IdsTxn")) == 120  # another version: other ids


def test_a_batch_write_without_a_transaction_sends_new_ids_each_run(
    spark: SparkSession, no_dedup: SparkCluster
) -> None:
    no_dedup.create_topic("IdsPlain")
    frame = spark.range(0, 30, 1, 2).select(F.lit("same").alias("body"))
    write_batch(frame, no_dedup, "IdsPlain")
    write_batch(frame, no_dedup, "IdsPlain")
    stored = read_ids(spark, no_dedup, "IdsPlain")
    assert len(stored) == 60 and all(len(bodies) == 1 for bodies in stored.values())


@pytest.mark.slow
def test_brokers_that_detect_duplicates_store_a_replayed_batch_once(
    spark: SparkSession, dedup: SparkCluster, tmp_path: Path
) -> None:
    dedup.create_topic("IdsOnce")
    checkpoint = tmp_path / "ckpt"
    first = run_rate_stream(spark, dedup, "IdsOnce", checkpoint)
    forget_last_commit(checkpoint)
    second = run_rate_stream(spark, dedup, "IdsOnce", checkpoint)
    stored = read_ids(spark, dedup, "IdsOnce")
    assert second >= ROWS_PER_BATCH
    assert all(len(bodies) == 1 for bodies in stored.values())
    assert len(stored) == first + second - ROWS_PER_BATCH  # the replayed batch's rows once


@pytest.mark.slow
def test_a_batch_replayed_in_another_time_zone_or_without_the_checkpoint_is_stored_once(
    spark: SparkSession, dedup: SparkCluster, tmp_path: Path
) -> None:
    """A row's id does not depend on where its task runs: the last batch, replayed by writers in
    another time zone and then again by writers that cannot read the checkpoint's offset log, has
    the same ids each time, and the brokers store every row once."""
    dedup.create_topic("IdsAnywhere")
    root = tmp_path / "checkpoints"
    checkpoint = root / "anywhere"  # the same checkpoint under either name
    first = run_rate_stream(
        spark, dedup, "IdsAnywhere", checkpoint, sink_format=writers_in_time_zone(spark, "Pacific/Kiritimati")
    )
    west = writers_in_time_zone(spark, "America/Los_Angeles")  # 22 hours behind Kiritimati
    forget_last_commit(checkpoint)
    second = run_rate_stream(spark, dedup, "IdsAnywhere", checkpoint, sink_format=west)
    stored = read_ids(spark, dedup, "IdsAnywhere")
    assert second >= ROWS_PER_BATCH
    assert all(len(bodies) == 1 for bodies in stored.values())
    assert len(stored) == first + second - ROWS_PER_BATCH

    forget_last_commit(checkpoint)
    with checkpoint_root(spark, root):
        third = run_rate_stream(spark, dedup, "IdsAnywhere", None, sink_format=west, query_name="anywhere")
    stored = read_ids(spark, dedup, "IdsAnywhere")
    assert third >= ROWS_PER_BATCH
    assert all(len(bodies) == 1 for bodies in stored.values())
    assert len(stored) == first + second + third - 2 * ROWS_PER_BATCH


def test_a_batch_write_with_a_transaction_run_twice_is_stored_once(spark: SparkSession, dedup: SparkCluster) -> None:
    """Identical rows, in one partition and across partitions, are all stored; the second run of the
    same transaction stores nothing."""
    dedup.create_topic("OnceTxn")
    frame = spark.range(0, 60, 1, 3).select((F.col("id") % 4).cast("string").alias("body"))
    for _ in range(2):
        write_batch(frame, dedup, "OnceTxn", txnAppId="nightly", txnVersion="7")
    stored = read_ids(spark, dedup, "OnceTxn")
    assert len(stored) == 60 and all(len(bodies) == 1 for bodies in stored.values())
    assert sorted(b for bodies in stored.values() for b in bodies) == sorted(str(i % 4).encode() for i in range(60))


def test_idempotent_batch_writes_need_a_transaction(spark: SparkSession, two_brokers: SparkCluster) -> None:
    two_brokers.create_topic("IdsRefused")
    frame = spark.range(3).select(F.col("id").cast("string").alias("body"))
    with pytest.raises(Exception, match="txnAppId and txnVersion"):
        write_batch(frame, two_brokers, "IdsRefused", idempotentWrites="true")
    with pytest.raises(ConfigError, match="go together"):
        parse_sink({"nameserver": "127.0.0.1:9876", "txnAppId": "app"})


def test_ids_depend_on_content_and_occurrence_not_on_order() -> None:
    rows = producer_batch(
        pa.table(
            {
                "body": [b"a", b"a", b"b", b"a", b"c"],
                "tags": ["t", "t", "t", None, "t"],
                "properties": pa.array(
                    [{"k": "v"}, {"k": "v"}, None, {"k": "v"}, {}], pa.map_(pa.string(), pa.string())
                ),
            }
        )
    )
    topics = pa.array(["T"] * 5)
    ids = IdScope(("stream", "query", 3), 0).ids(rows, topics)[0].to_pylist()
    assert len(set(ids)) == 5
    assert all(i[20:28] == "00000000" for i in ids)  # the time field
    order = pa.array([4, 3, 2, 1, 0])
    again = IdScope(("stream", "query", 3), 0).ids(rows.take(order), topics.take(order))[0].to_pylist()
    assert sorted(again) == sorted(ids)
    in_two = IdScope(("stream", "query", 3), 0)
    assert (
        in_two.ids(rows.slice(0, 2), topics.slice(0, 2))[0].to_pylist()
        + in_two.ids(rows.slice(2), topics.slice(2))[0].to_pylist()
        == ids
    )  # occurrences count across a task's Arrow batches
    for other in (IdScope(("stream", "query", 4), 0), IdScope(("stream", "query", 3), 1)):
        assert not set(other.ids(rows, topics)[0].to_pylist()) & set(ids)
    assert Counter(i[:8] for i in ids).most_common(1)[0][1] == 1
