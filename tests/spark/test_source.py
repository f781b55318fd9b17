"""The Spark source end to end: real Spark queries against brokers started as subprocesses."""

from __future__ import annotations

import datetime as dt
import json
import pkgutil
import time

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rocketspark.spark import versions
from rocketspark.spark.datasource import RocketMQDataSource
from rocketspark.spark.progress import lag_behind_latest
from tests.interop.driver import OutgoingMessage, RealClient, Send
from tests.spark.queries import (
    COLUMNS,
    expected_frame,
    forget_last_commit,
    needs_admission_control,
    run_available_now,
    run_python_with_spark,
    run_recording_batches,
    stamp_between,
    stored_rows,
    stream,
    wait_for,
)


def test_available_now_reads_exactly_the_messages_of_8_queues_on_2_brokers(spark, two_brokers, checkpoint) -> None:
    two_brokers.create_topic("Orders")
    started = dt.datetime.now(dt.UTC)
    expected = two_brokers.produce("Orders", 400)
    before = two_brokers.runtime_counters()
    frame = stream(spark, two_brokers, "Orders", "orders_group", startingOffsets="earliest")
    query = run_available_now(frame, "memory", checkpoint, name="orders")
    result = spark.table("orders")
    assert_df_equality(result.select(*COLUMNS), expected_frame(spark, expected), ignore_row_order=True)
    row = result.filter(F.col("keys") == "key-7").first()
    assert row.properties["seq"] == "7" and row.bornHost.startswith("127.0.0.1:")
    assert started - dt.timedelta(seconds=5) < row.storeTimestamp.replace(tzinfo=dt.UTC) < dt.datetime.now(dt.UTC)
    assert row.reconsumeTimes == 0
    after = two_brokers.runtime_counters()
    assert after["arrowPullMessages"] - before["arrowPullMessages"] >= 400
    assert after["standardPullMessages"] == before["standardPullMessages"]
    if versions.has(versions.ADMISSION_CONTROL):  # before 4.2: tests/spark/test_versions.py
        # the group's broker offsets equal the end of the last batch: every queue fully read
        assert set(two_brokers.group_offsets("orders_group", "Orders").values()) == {50}
        assert query.lastProgress["sources"][0]["latestOffset"] is not None
    # its tasks marked which query reads as the group, for admin tools (the dashboard's groups page)
    mark = two_brokers.query_marks()["orders_group"]
    assert (mark.query_id, mark.run_id, mark.query_name, mark.topics) == (query.id, query.runId, "orders", ["Orders"])


def test_tag_filter(spark, two_brokers, checkpoint) -> None:
    two_brokers.create_topic("Tagged")
    expected = [r for r in two_brokers.produce("Tagged", 90) if r[5] in ("A", "C")]
    frame = stream(spark, two_brokers, "Tagged", "tagged_group", startingOffsets="earliest", tags="A || C")
    run_available_now(frame, "memory", checkpoint, name="tagged")
    assert_df_equality(
        spark.table("tagged").select(*COLUMNS),
        expected_frame(spark, expected),
        ignore_row_order=True,
    )


@needs_admission_control
def test_max_messages_per_trigger_caps_every_batch(spark, two_brokers, checkpoint) -> None:
    two_brokers.create_topic("Limited")
    two_brokers.produce("Limited", 300)
    frame = stream(
        spark, two_brokers, "Limited", "limited_group", startingOffsets="earliest", maxMessagesPerTrigger="70"
    )
    query = run_available_now(frame, "memory", checkpoint, name="limited")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 70 and sum(sizes) == 300 and len(sizes) >= 5
    assert spark.table("limited").select("msgId").distinct().count() == 300


@pytest.mark.slow
@needs_admission_control
def test_replayed_batch_is_identical_and_the_parquet_sink_holds_each_message_once(spark, two_brokers, tmp_path) -> None:
    two_brokers.create_topic("Replayed")
    two_brokers.produce("Replayed", 200)
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    options = {"startingOffsets": "earliest", "maxMessagesPerTrigger": "60"}
    run_available_now(
        stream(spark, two_brokers, "Replayed", "replay_group", **options), "parquet", checkpoint, path=str(output)
    )
    first_rows = spark.read.parquet(str(output)).select("msgId").collect()
    last = forget_last_commit(checkpoint)  # Spark must run that batch again from its logged offsets
    run_available_now(
        stream(spark, two_brokers, "Replayed", "replay_group", **options), "parquet", checkpoint, path=str(output)
    )
    assert (checkpoint / "commits" / str(last)).exists()
    stored = spark.read.parquet(str(output))
    assert stored.count() == 200 and stored.select("msgId").distinct().count() == 200
    assert sorted(first_rows) == sorted(stored.select("msgId").collect())

    # the replay reads the very rows the first run read: compare batch by batch
    seen: dict[int, list[list[str]]] = {}
    replay_checkpoint = tmp_path / "ckpt2"
    for _ in range(2):
        run_recording_batches(
            stream(spark, two_brokers, "Replayed", "replay_group2", **options), replay_checkpoint, seen
        )
        if not any(len(batches) == 2 for batches in seen.values()):
            forget_last_commit(replay_checkpoint)
    replayed = [batch for batch in seen.values() if len(batch) == 2]
    assert len(replayed) == 1 and replayed[0][0] == replayed[0][1]


@pytest.mark.slow
def test_stopped_query_continues_where_it_stopped(spark, two_brokers, tmp_path) -> None:
    two_brokers.create_topic("Continued")
    two_brokers.produce("Continued", 80)
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"

    def start():  # type: ignore[no-untyped-def]
        frame = stream(spark, two_brokers, "Continued", "continued_group", startingOffsets="earliest")
        return (
            frame.writeStream.format("parquet")
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="500 milliseconds")
            .start(str(output))
        )

    query = start()
    try:
        wait_for(lambda: stored_rows(spark, output) == 80, "80 rows in the sink")

        # while it runs, RocketMQ's tools show the group's lag draining to 0 on both brokers; the query
        # is no member of its group (it joins no group, so it takes no queue from one)
        def no_member_no_lag() -> bool:
            consumer_ids, lag = two_brokers.group_view("continued_group", "Continued")
            return [len(ids) for ids in consumer_ids] == [0, 0] and lag == 0

        wait_for(no_member_no_lag, "the group's lag at 0, with no member")
    finally:
        query.stop()
    two_brokers.produce("Continued", 40, first=80)
    query = start()
    try:
        wait_for(lambda: stored_rows(spark, output) == 120, "120 rows in the sink")
    finally:
        query.stop()
    frame = spark.read.parquet(str(output))
    assert frame.select("msgId").distinct().count() == 120


@needs_admission_control  # the group's offsets reach an AvailableNow run's end
def test_starting_offsets_group_resumes_where_the_group_stopped(spark, two_brokers, tmp_path) -> None:
    two_brokers.create_topic("Resumed")
    two_brokers.produce("Resumed", 64)
    first = stream(spark, two_brokers, "Resumed", "resumed_group", startingOffsets="earliest")
    run_available_now(first, "memory", tmp_path / "a", name="resumed_first")
    assert spark.table("resumed_first").count() == 64
    later = two_brokers.produce("Resumed", 24, first=64)
    second = stream(spark, two_brokers, "Resumed", "resumed_group")  # startingOffsets defaults to group
    run_available_now(second, "memory", tmp_path / "b", name="resumed_second")
    assert sorted(r.msgId for r in spark.table("resumed_second").collect()) == sorted(r[4] for r in later)


@needs_admission_control  # the group's offsets reach an AvailableNow run's end
def test_new_checkpoint_moves_the_group_backwards(spark, two_brokers, tmp_path) -> None:
    two_brokers.create_topic("Rewound")
    two_brokers.produce("Rewound", 16)
    run_available_now(
        stream(spark, two_brokers, "Rewound", "rewound_group", startingOffsets="earliest"),
        "memory",
        tmp_path / "a",
        name="rw1",
    )
    assert set(two_brokers.group_offsets("rewound_group", "Rewound").values()) == {2}
    during_first_batch: list[dict] = []

    def record(batch: DataFrame, batch_id: int) -> None:  # the batch's end is mirrored only after it
        during_first_batch.append(two_brokers.group_offsets("rewound_group", "Rewound"))
        batch.count()

    spec = json.dumps({"Rewound": {"broker-a": {"0": 1}}})
    query = (
        stream(spark, two_brokers, "Rewound", "rewound_group", startingOffsets=spec)
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(tmp_path / "b"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    # queue 0 of broker-a restarted at 1; queues the JSON does not name started at latest (2)
    moved = during_first_batch[0]
    assert moved[("broker-a", 0)] == 1 and {o for q, o in moved.items() if q != ("broker-a", 0)} == {2}
    assert query.recentProgress[0]["numInputRows"] == 1
    assert set(two_brokers.group_offsets("rewound_group", "Rewound").values()) == {2}


@needs_admission_control
def test_progress_reports_the_latest_offsets_so_lag_can_be_computed(spark, two_brokers, checkpoint) -> None:
    two_brokers.create_topic("Lagging")
    two_brokers.produce("Lagging", 160)  # 20 a queue
    frame = stream(
        spark, two_brokers, "Lagging", "lagging_group", startingOffsets="earliest", maxMessagesPerTrigger="40"
    )
    query = run_available_now(frame, "memory", checkpoint, name="lagging")
    first = next(p for p in query.recentProgress if p["numInputRows"])
    latest = json.loads(first["sources"][0]["latestOffset"])
    assert latest == {"Lagging": {b: {str(q): 20 for q in range(4)} for b in ("broker-a", "broker-b")}}
    assert lag_behind_latest(first) == 160 - 40
    assert lag_behind_latest(query.lastProgress) == 0


def test_batch_reads_between_offsets_and_times(spark, two_brokers) -> None:
    two_brokers.create_topic("Bounded", queues=1)
    early = two_brokers.produce("Bounded", 10)
    middle = int(stamp_between().timestamp() * 1000)
    late = two_brokers.produce("Bounded", 10, first=10)

    def base():  # type: ignore[no-untyped-def]  # a DataFrameReader is mutable: one per read
        return spark.read.format("rocketmq").option("nameserver", two_brokers.namesrv_addr).option("topic", "Bounded")

    assert base().load().count() == 20
    ending = json.dumps({"Bounded": {"broker-a": {"0": 3}, "broker-b": {"0": 0}}})
    assert base().option("endingOffsets", ending).load().count() == 3
    starting = json.dumps({"Bounded": {"broker-a": {"0": 2}, "broker-b": {"0": -2}}})
    window = base().option("startingOffsets", starting).option("endingOffsets", ending).load()
    assert sorted(r.queueOffset for r in window.filter(F.col("brokerName") == "broker-a").collect()) == [2]
    after = base().option("startingTimestamp", str(middle)).load()
    assert sorted(r.msgId for r in after.collect()) == sorted(r[4] for r in late)
    before = base().option("endingTimestamp", str(middle)).load()
    assert sorted(r.msgId for r in before.collect()) == sorted(r[4] for r in early)


def test_errors_name_what_is_wrong(spark, two_brokers) -> None:
    def base():  # type: ignore[no-untyped-def]
        return spark.read.format("rocketmq").option("nameserver", two_brokers.namesrv_addr)

    with pytest.raises(Exception, match="NoSuchTopic.*does not exist.*" + two_brokers.namesrv_addr):
        base().option("topic", "NoSuchTopic").load().count()
    with pytest.raises(Exception, match="exactly one of the options topic, topics or topicPattern"):
        base().option("topic", "A").option("topicPattern", "A.*").load().count()
    with pytest.raises(Exception, match="consumerGroup is required for streaming"):
        frame = spark.readStream.format("rocketmq").option("nameserver", "127.0.0.1:1").option("topic", "T").load()
        frame.writeStream.format("noop").trigger(availableNow=True).start().awaitTermination(60)
    started = time.monotonic()
    with pytest.raises(Exception, match="no name server answered"):
        spark.read.format("rocketmq").option("nameserver", "127.0.0.1:1").option("topic", "T").load().count()
    assert time.monotonic() - started < 60


def test_topic_pattern_skips_system_topics(spark, two_brokers) -> None:
    two_brokers.create_topic("PatternOne", queues=1)
    two_brokers.create_topic("PatternTwo", queues=1)
    two_brokers.produce("PatternOne", 2)
    two_brokers.produce("PatternTwo", 2)
    frame = (
        spark.read.format("rocketmq")
        .option("nameserver", two_brokers.namesrv_addr)
        .option("topicPattern", "Pattern.*|TBW102|%RETRY%.*")
    )
    assert sorted({r.topic for r in frame.load().collect()}) == ["PatternOne", "PatternTwo"]


def test_messages_of_the_real_rocketmq_client_arrive_through_spark(spark, two_brokers, tmp_path) -> None:
    """Sent by Apache RocketMQ's own client (single and batch sends), read by a Spark batch query."""
    topic = "FromRealClient"
    two_brokers.create_topic(topic, queues=2)
    single = [
        OutgoingMessage(topic, f"single {i}", tags="TagS", keys=f"single-{i}", properties={"seq": str(i)})
        for i in range(30)
    ]
    batch = [OutgoingMessage(topic, f"batch {i}", tags="TagB", keys=f"batch-{i}") for i in range(10)]
    home = tmp_path / "client-home"
    home.mkdir()
    client = RealClient(two_brokers.namesrv_addr, home, [two_brokers.namesrv, *two_brokers.brokers.values()])
    try:
        outcomes = client.produce("PID_spark_source", [Send("sync", single), Send("batch", batch)])
        assert all(outcome.status == "OK" for outcome in outcomes), client.diagnostics()
    finally:
        client.close()
    rows = (
        spark.read.format("rocketmq")
        .option("nameserver", two_brokers.namesrv_addr)
        .option("topic", topic)
        .load()
        .collect()
    )
    assert sorted((r.keys, r.tags, r.body.decode(), r.properties.get("seq")) for r in rows) == sorted(
        (m.keys, m.tags, m.body, m.properties.get("seq")) for m in [*single, *batch]
    )
    reported = {outcome.msg_id for outcome in outcomes[: len(single)]}
    assert reported <= {r.msgId for r in rows}


def test_explicit_registration_still_works(spark, two_brokers) -> None:
    """`format("rocketmq")` needs no register() (the other tests rely on that); registering by hand is harmless."""
    assert "pyspark_rocketmq" in {module.name for module in pkgutil.iter_modules()}
    if versions.has(versions.REREGISTER):
        spark.dataSource.register(RocketMQDataSource)
    else:  # PySpark 4.0 keeps the name of the installed module's source
        with pytest.raises(Exception, match="DATA_SOURCE_ALREADY_EXISTS"):
            spark.dataSource.register(RocketMQDataSource)
    two_brokers.create_topic("Registered", queues=1)
    two_brokers.produce("Registered", 3)
    frame = spark.read.format("rocketmq").option("nameserver", two_brokers.namesrv_addr).option("topic", "Registered")
    assert frame.load().count() == 3


FRESH_SPARK_READ = """
import sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
try:
    frame = spark.read.format("rocketmq").option("nameserver", sys.argv[1]).option("topic", sys.argv[2]).load()
    print("rows", frame.count())
finally:
    spark.stop()
"""


@pytest.mark.slow
def test_format_rocketmq_needs_no_registration_in_a_fresh_spark_process(two_brokers, tmp_path) -> None:
    """Spark registers pyspark_* data sources once per JVM: only a new process shows it happening."""
    two_brokers.create_topic("FreshProcess", queues=1)
    two_brokers.produce("FreshProcess", 5)
    finished = run_python_with_spark(
        FRESH_SPARK_READ, two_brokers.namesrv_addr, "FreshProcess", cwd=tmp_path, timeout_s=240
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "rows 5" in finished.stdout
