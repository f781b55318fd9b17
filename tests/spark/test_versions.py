"""What the source does differently on PySpark 4.0 and 4.1, which have no streaming admission control
(docs/spark.md, "Spark versions"): `make test-oldest-spark` runs these on the oldest PySpark; on 4.2
and newer they are skipped, the other Spark tests showing what those do."""

from __future__ import annotations

import re

import pytest
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from rocketspark.spark import versions
from rocketspark.spark.progress import queue_lag
from tests.spark.cluster import Brokers, Row, ends_of
from tests.spark.queries import QUERY_TIMEOUT_S, run_available_now, stream, stream_reader

pytestmark = pytest.mark.skipif(
    versions.has(versions.ADMISSION_CONTROL), reason="PySpark 4.2 and newer have streaming admission control"
)


def test_a_trigger_limit_fails_the_query_naming_the_version(spark, two_brokers, checkpoint) -> None:
    two_brokers.create_topic("Limited", queues=1, on=("broker-a",))
    two_brokers.produce("Limited", 5, on=("broker-a",))
    frame = stream(spark, two_brokers, "Limited", "limited_group", startingOffsets="earliest", maxOffsetsPerTrigger="2")
    line = (
        f"option maxOffsetsPerTrigger needs PySpark 4.2 or newer (streaming admission control); this is PySpark "
        f"{versions.PYSPARK_VERSION}: upgrade PySpark or leave option maxOffsetsPerTrigger out"
    )
    with pytest.raises(Exception, match=re.escape(line)):  # the query's exception (Spark's wording)
        run_available_now(frame, "memory", checkpoint, name="limited")


def test_available_now_reads_all_and_the_next_run_mirrors_its_end(spark, two_brokers, checkpoint) -> None:
    """Spark runs Trigger.AvailableNow as one batch (its fallback for sources without the feature),
    up to what `latestOffset()` returned; the source is not asked again after it, so the group's
    offsets reach that end when the next run plans, from the end Spark asks it to plan first. The
    progress's latestOffset is the batch's end: the lag from it needs 4.2."""
    two_brokers.create_topic("Fallback", queues=2)
    sent = two_brokers.produce("Fallback", 40)
    frame = stream(spark, two_brokers, "Fallback", "fallback_group", startingOffsets="earliest")
    seen: dict[int, list[str]] = {}

    def run() -> StreamingQuery:
        def keep(batch: DataFrame, batch_id: int) -> None:
            seen[batch_id] = sorted(r.msgId for r in batch.select("msgId").collect())

        query = frame.writeStream.foreachBatch(keep).option("checkpointLocation", str(checkpoint))
        started = query.trigger(availableNow=True).start()
        assert started.awaitTermination(QUERY_TIMEOUT_S)
        return started

    query = run()
    assert seen == {0: sorted(r[4] for r in sent)}
    assert set(two_brokers.group_offsets("fallback_group", "Fallback", 2).values()) == {0}
    assert query.lastProgress["sources"][0]["latestOffset"] == query.lastProgress["sources"][0]["endOffset"]
    with pytest.raises(versions.SparkVersionError, match=f"this is PySpark {versions.PYSPARK_VERSION}"):
        queue_lag(query.lastProgress)
    more = two_brokers.produce("Fallback", 8, first=40)
    run()
    assert seen[1] == sorted(r[4] for r in more)
    assert two_brokers.group_offsets("fallback_group", "Fallback", 2) == ends_of(sent)


@pytest.mark.slow
def test_what_takes_two_batches_takes_two_available_now_runs(spark, brokers: Brokers, checkpoint) -> None:
    """Spark's one batch reads the queues whose broker answers. The queues of a broker away when
    the query started are seen for the first time once it is back: that run's batch places them
    at their start, and the next run's reads them (4.2 waits for the broker instead)."""
    cluster = brokers.cluster
    cluster.create_topic("Away", queues=2)
    sent = cluster.produce("Away", 20)
    cluster.brokers["broker-b"].kill()
    frame = stream(spark, cluster, "Away", "away_group", startingOffsets="earliest")
    output = checkpoint.parent / "out"

    def run() -> list[str]:
        run_available_now(frame, "parquet", checkpoint, path=str(output))
        return sorted(r.msgId for r in spark.read.parquet(str(output)).select("msgId").collect())

    on_a = sorted(r[4] for r in sent if r[1] == "broker-a")
    assert run() == on_a
    brokers.restart_b()
    assert run() == on_a
    assert run() == sorted(r[4] for r in sent)


@pytest.mark.slow
def test_a_restarted_reader_plans_from_the_end_spark_hands_it(brokers: Brokers) -> None:
    """The calls PySpark 4.0 and 4.1 make on the driver's reader, on the reader itself: planning
    passes no start (the reader keeps the end it returned); a restarted query first asks for the
    partitions of its last batch (`partitions(end, end)`), whose end is then the start. A queue of a
    broker away at that restart keeps its offset, and is read on once the broker is back."""
    cluster = brokers.cluster
    cluster.create_topic("Restarted", queues=2)
    options = {"nameserver": cluster.namesrv_addr, "topic": "Restarted", "consumerGroup": "restarted_group"}
    sent = cluster.produce("Restarted", 20)
    first = stream_reader({**options, "startingOffsets": "earliest"})
    end = first.latestOffset()
    first.partitions(first.initialOffset(), end)
    assert first.latestOffset() == end  # nothing new: the same end

    more = cluster.produce("Restarted", 8, first=20)
    cluster.brokers["broker-b"].kill()
    again = stream_reader({**options, "startingOffsets": "earliest"})
    again.partitions(end, end)  # what Spark asks first on a restart whose last batch was committed
    moved = again.latestOffset()
    assert moved["Restarted"]["broker-b"] == end["Restarted"]["broker-b"]  # kept while away
    assert moved["Restarted"]["broker-a"] == queue_ends(sent + more, "broker-a")
    brokers.restart_b()
    assert again.latestOffset()["Restarted"]["broker-b"] == queue_ends(sent + more, "broker-b")


def queue_ends(rows: list[Row], broker: str) -> dict[str, int]:
    """The end offsets of `rows` in the queues of `broker`, as an offset dict holds them."""
    return {str(q): o for (b, q), o in ends_of(rows).items() if b == broker}
