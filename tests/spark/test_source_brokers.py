"""The Spark source while brokers go away: a broker down when the query starts, Trigger.AvailableNow
with a routed broker that does not answer. (A broker stopped or killed under a running stream:
test_source_changes.py.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from rocketspark.client.retry import ASK_WINDOW_S
from rocketspark.spark.options import parse
from rocketspark.spark.source.queue_view import QueueView
from tests.spark.cluster import Brokers, ends_of
from tests.spark.queries import needs_admission_control, start_stream, stored_rows, stream, wait_for


def msg_ids(spark: SparkSession, output: Path) -> list[str]:
    return sorted(r.msgId for r in spark.read.parquet(str(output)).select("msgId").collect())


@pytest.mark.slow
@pytest.mark.parametrize("starting", ["latest", "group"])
def test_queues_of_a_broker_away_at_the_start_follow_the_starting_option(
    spark: SparkSession, brokers: Brokers, tmp_path: Path, starting: str
) -> None:
    cluster = brokers.cluster
    cluster.create_topic("AwayAtStart", queues=2)
    cluster.produce("AwayAtStart", 20)  # before the query: neither broker's share may be read
    cluster.brokers["broker-b"].stop()
    wait_for(lambda: brokers.queue_count("AwayAtStart", "broker-b") == 0, "broker-b to leave the route")
    output = tmp_path / "out"
    frame = stream(spark, cluster, "AwayAtStart", f"away_{starting}_group", startingOffsets=starting)
    query = start_stream(frame, output, tmp_path / "ckpt")
    try:
        wait_for(lambda: bool(query.recentProgress), "the query's first trigger")
        sent = cluster.produce("AwayAtStart", 10, first=20, on=("broker-a",))
        wait_for(lambda: stored_rows(spark, output) >= 10, "messages sent to broker-a")
        brokers.restart_b()
        wait_for(lambda: brokers.queue_count("AwayAtStart", "broker-b") == 2, "broker-b to come back")
        cluster.create_topic("AwayAtStart", queues=4, on=("broker-a",))  # scale-out after the start
        wait_for(lambda: brokers.queue_count("AwayAtStart", "broker-a") == 4, "broker-a's 4 queues")
        sent += cluster.produce("AwayAtStart", 40, first=30)
        assert {(r[1], r[2]) for r in sent} >= {("broker-a", 2), ("broker-a", 3), ("broker-b", 0)}
        wait_for(lambda: stored_rows(spark, output) >= 50, "messages sent after broker-b came back")
        assert query.isActive, query.exception()
    finally:
        query.stop()
    assert msg_ids(spark, output) == sorted(r[4] for r in sent)


@pytest.mark.slow
@needs_admission_control
def test_available_now_waits_for_a_routed_broker_then_fails_naming_it(
    spark: SparkSession, brokers: Brokers, tmp_path: Path
) -> None:
    cluster = brokers.cluster
    cluster.create_topic("NowWaits", queues=2)
    sent = cluster.produce("NowWaits", 20)
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"

    def start(**options: str):  # type: ignore[no-untyped-def]
        frame = stream(spark, cluster, "NowWaits", "now_waits_group", startingOffsets="earliest", **options)
        writer = frame.writeStream.format("parquet").option("checkpointLocation", str(checkpoint))
        return writer.trigger(availableNow=True).start(str(output))

    assert start().awaitTermination(120)
    sent += cluster.produce("NowWaits", 20, first=20)
    with brokers.b_frozen():
        failed = start(pullTimeoutMs="3000")
        with pytest.raises(Exception, match=r"broker\(s\) broker-b could not be reached for 3000 ms") as error:
            failed.awaitTermination(120)
        assert "topic NowWaits, broker broker-b, queue 0" in str(error.value)
        assert stored_rows(spark, output) == 30  # broker-a's new messages were read before the wait
        assert brokers.queue_count("NowWaits", "broker-b") == 2  # still routed

        waiting = start(pullTimeoutMs="120000")
        time.sleep(5)  # the run has looked for broker-b more than once by now
        assert waiting.isActive, "the AvailableNow run ended with broker-b's messages unread"
    try:  # broker-b answers again
        assert waiting.awaitTermination(120), "the AvailableNow run did not finish after broker-b came back"
    finally:
        waiting.stop()
    assert waiting.exception() is None
    assert msg_ids(spark, output) == sorted(r[4] for r in sent)
    assert cluster.group_offsets("now_waits_group", "NowWaits", 2) == ends_of(sent)


def test_questions_to_a_frozen_broker_end_at_the_views_deadline(brokers: Brokers) -> None:
    """How the AvailableNow wait keeps to pullTimeoutMs: no question of its views runs past their
    deadline, though each attempt to a broker that does not answer waits for the request timeout."""
    cluster = brokers.cluster
    cluster.create_topic("Deadline", queues=1)
    options = parse({"nameserver": cluster.namesrv_addr, "topic": "Deadline"}, streaming=False)
    queues = QueueView(options).queues(must_exist=True)
    with brokers.b_frozen():
        began = time.monotonic()
        view = QueueView(options, deadline=began + 1.0)
        answered = view.max_offsets(queues)
        took = time.monotonic() - began
    assert [q.broker_name for q in answered] == ["broker-a"]
    assert [q.broker_name for q in view.unreachable] == ["broker-b"]
    assert took < ASK_WINDOW_S / 2, f"the view's questions took {took:.1f} s, past its deadline of 1 s"
