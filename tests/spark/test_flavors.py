"""The connector on both flavors of the broker: each feature of the source and the sink once, on
brokers that answer as this project's (`rocketspark`) and as Apache RocketMQ 4.9 (`flavor=apache`:
no Arrow codes, no QUEUE_BODY_BYTES, no duplicate window, standard pulls capped at 32 messages).
Every test runs on both and asserts the same rows; where the flavors differ (docs/spark.md, "On
Apache RocketMQ (flavor=apache)") it asserts each flavor's outcome. Elsewhere on both flavors:
times in `test_source_times.py`, bounds under a tag filter in `test_source_bounds.py`, a plain
`df.write` in `test_sink_brokers.py`, idempotent ids of streaming and batch writes in
`test_sink_ids.py` (`no_dedup` is apache, `dedup` the default flavor), the clients in
`tests/integration/test_flavor_apache.py`."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from tests.harness import ServerFactory
from tests.spark.cluster import Row, SparkCluster, ends_of, two_brokers_on
from tests.spark.queries import (
    COLUMNS,
    batch,
    expected_frame,
    needs_admission_control,
    run_available_now,
    stamp_between,
    stream,
)
from tests.spark.test_source_changes import delete_topic

FLAVORS = ("rocketspark", "apache")
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


@pytest.fixture(scope="module", params=FLAVORS)
def flavor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def two_brokers(flavor: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """broker-a and broker-b of one flavor (each flavor runs every test of the module); sends may
    wait 5 s for the writer, as a loaded test machine can stall a broker."""
    factory = ServerFactory(tmp_path_factory.mktemp(f"flavor-{flavor}"))
    try:
        yield two_brokers_on(factory, "--set", f"flavor={flavor}", "--set", "waitTimeMillsInSendQueue=5000")
    finally:
        factory.stop_all()


def pulled(cluster: SparkCluster, before: dict[str, int]) -> dict[str, int]:
    """The brokers' pull counters since `before`."""
    after = cluster.runtime_counters()
    keys = ("arrowPullMessages", "standardPullMessages", "standardPullRequests")
    return {k: after.get(k, 0) - before.get(k, 0) for k in keys}


def test_batch_reads_between_offsets(spark: SparkSession, flavor: str, two_brokers: SparkCluster) -> None:
    """earliest/latest and JSON bounds, and queues split by minPartitions, give the same rows; on
    apache through standard pulls of at most 32 messages (a queue of 50 takes two)."""
    two_brokers.create_topic("FlavorBounds", queues=1)
    sent = two_brokers.produce("FlavorBounds", 100)  # 50 in each broker's queue

    def rows(expected: list[Row], **options: str) -> None:
        read = batch(spark, two_brokers, "FlavorBounds", **options).select(*COLUMNS)
        assert_df_equality(read, expected_frame(spark, expected), ignore_row_order=True)

    rows(sent)
    before = two_brokers.runtime_counters()
    assert batch(spark, two_brokers, "FlavorBounds").count() == 100
    counted = pulled(two_brokers, before)
    if flavor == "apache":
        assert counted["arrowPullMessages"] == 0 and counted["standardPullMessages"] == 100
        assert counted["standardPullRequests"] >= 4  # 2 queues of 50, at most 32 a pull
    else:
        assert counted["arrowPullMessages"] == 100 and counted["standardPullMessages"] == 0
    rows(sent, startingOffsets="earliest", endingOffsets="latest")
    rows(sent, minPartitions="6")  # parts of a queue start mid-queue
    assert batch(spark, two_brokers, "FlavorBounds", startingOffsets="latest").count() == 0
    starting = json.dumps({"FlavorBounds": {"broker-a": {"0": 10}, "broker-b": {"0": -2}}})
    ending = json.dumps({"FlavorBounds": {"broker-a": {"0": 45}, "broker-b": {"0": 40}}})
    window = [r for r in sent if (10 if r[1] == "broker-a" else 0) <= r[3] < (45 if r[1] == "broker-a" else 40)]
    assert len(window) == 35 + 40
    rows(window, startingOffsets=starting, endingOffsets=ending)


@needs_admission_control
def test_max_messages_per_trigger_batches_and_group_offsets(
    spark: SparkSession, flavor: str, two_brokers: SparkCluster, checkpoint: Path
) -> None:
    """An AvailableNow run under maxMessagesPerTrigger: the same batches of the same rows, and the
    group's mirrored offsets at the queues' ends, with lag 0 in GET_CONSUME_STATS and no member."""
    two_brokers.create_topic("FlavorCapped", queues=2)
    sent = two_brokers.produce("FlavorCapped", 160)  # 40 in each of 4 queues
    frame = stream(
        spark, two_brokers, "FlavorCapped", "flavor_capped", startingOffsets="earliest", maxMessagesPerTrigger="50"
    )
    query = run_available_now(frame, "memory", checkpoint, name=f"flavor_capped_{flavor}")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [50, 50, 50, 10]
    result = spark.table(f"flavor_capped_{flavor}").select(*COLUMNS)
    assert_df_equality(result, expected_frame(spark, sent), ignore_row_order=True)
    assert two_brokers.group_offsets("flavor_capped", "FlavorCapped", queues=2) == ends_of(sent)
    members, lag = two_brokers.group_view("flavor_capped", "FlavorCapped")
    assert members == [[], []] and lag == 0


@needs_admission_control
def test_max_bytes_per_trigger_fails_naming_the_option_on_apache(
    spark: SparkSession, flavor: str, two_brokers: SparkCluster, checkpoint: Path
) -> None:
    """The bundled broker sums stored body sizes (QUEUE_BODY_BYTES) and each batch keeps to the
    limit; apache has no such request, so the query fails at its first trigger naming the option."""
    two_brokers.create_topic("FlavorBytes", queues=1)
    two_brokers.produce("FlavorBytes", 40, batched=True, body_size=100)  # 20 bodies of 100 bytes a queue
    frame = stream(
        spark, two_brokers, "FlavorBytes", "flavor_bytes", startingOffsets="earliest", maxBytesPerTrigger="1000"
    )
    name = f"flavor_bytes_{flavor}"
    if flavor == "apache":
        query = run_available_now(frame, "memory", checkpoint, name=name, expect_error=True)
        error = str(query.exception())
        assert "option maxBytesPerTrigger needs brokers that sum stored body sizes" in error, error
        assert not any(p["numInputRows"] for p in query.recentProgress)  # nothing was read
    else:
        query = run_available_now(frame, "memory", checkpoint, name=name)
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert sizes == [10, 10, 10, 10]  # 1000 bytes: 5 bodies of 100 from each queue


def test_a_filtered_batch_read_gives_the_same_rows_with_pushdown_on_and_off(
    spark: SparkSession, two_brokers: SparkCluster
) -> None:
    two_brokers.create_topic("FlavorPushed", queues=2)
    early = two_brokers.produce("FlavorPushed", 40)
    middle = stamp_between()
    late = two_brokers.produce("FlavorPushed", 40, first=40)

    def read(condition: Column, *, pushdown: bool) -> DataFrame:
        spark.conf.set(PUSHDOWN, str(pushdown).lower())
        try:
            frame = batch(spark, two_brokers, "FlavorPushed").filter(condition)
            return frame.select(*COLUMNS).localCheckpoint()
        finally:
            spark.conf.unset(PUSHDOWN)

    stamp = F.col("storeTimestamp")
    cases = [
        (stamp >= F.lit(middle), late),
        ((stamp < F.lit(middle)) & (F.col("queueId") == 1), [r for r in early if r[2] == 1]),
        (
            F.col("queueOffset").between(3, 12) & F.col("tags").isin("A", "B"),
            [r for r in early + late if 3 <= r[3] <= 12 and r[5] in ("A", "B")],
        ),
    ]
    for condition, expected in cases:
        pushed = read(condition, pushdown=True)
        assert_df_equality(pushed, read(condition, pushdown=False), ignore_row_order=True)
        assert_df_equality(pushed, expected_frame(spark, expected), ignore_row_order=True)


@pytest.mark.slow
@needs_admission_control  # the run that moves the queues back reads on in its next batch
def test_fail_on_data_loss_when_the_topic_is_created_again(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path
) -> None:
    """The topic deleted and created again with fewer messages while the query is stopped:
    failOnDataLoss=true fails naming the queues; false reads the new topic from its first message."""
    two_brokers.create_topic("FlavorReborn", queues=1)
    sent = two_brokers.produce("FlavorReborn", 40)  # 20 a queue
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"

    def run(*, expect_error: bool = False, **options: str):  # type: ignore[no-untyped-def]
        frame = stream(spark, two_brokers, "FlavorReborn", "flavor_reborn", startingOffsets="earliest", **options)
        return run_available_now(frame, "parquet", checkpoint, path=str(output), expect_error=expect_error)

    run()
    delete_topic(two_brokers, "FlavorReborn")
    two_brokers.create_topic("FlavorReborn", queues=1)
    recreated = two_brokers.produce("FlavorReborn", 10, first=40)  # 5 a queue
    error = str(run(expect_error=True).exception())
    assert "topic FlavorReborn, broker broker-a, queue 0 ends at offset 5 but the query is at 20" in error, error
    assert "set failOnDataLoss=false" in error
    run(failOnDataLoss="false")  # moves the queues back to their first message and reads on from there
    stored = sorted(r.msgId for r in spark.read.parquet(str(output)).select("msgId").collect())
    assert stored == sorted(r[4] for r in sent + recreated)
    assert two_brokers.group_offsets("flavor_reborn", "FlavorReborn", queues=1) == ends_of(recreated)


@pytest.mark.slow
def test_a_transactional_batch_write_stores_every_row_once(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path
) -> None:
    """transactional=true in its simplest use (one batch write, nothing fails): every row once on both."""
    two_brokers.create_topic("FlavorTxn")
    bodies = [f"txn row {i}" for i in range(200)]
    frame = spark.createDataFrame([(b,) for b in bodies], "body string").repartition(2)
    writer = frame.write.format("rocketmq").option("nameserver", two_brokers.namesrv_addr).option("topic", "FlavorTxn")
    writer = writer.option("transactional", "true").option("transactionLog", str(tmp_path / "log"))
    writer.option("txnAppId", "flavors").option("txnVersion", "1").mode("append").save()
    stored = batch(spark, two_brokers, "FlavorTxn").select("body").collect()
    assert Counter(bytes(r.body).decode() for r in stored) == Counter(bodies)
