"""Per-minute metrics of a clickstream topic: counts per tag and revenue, by event time.

Reads a topic of JSON events (`{"user", "page", "price", "time"}`, tags `view`, `click`,
`purchase`; see :mod:`rocketspark.apps.clickstream`) with `format("rocketmq")` as an `availableNow`
stream, aggregates them per event-time window in output mode `complete`, and hands every batch's
result to `foreachBatch`, which overwrites the Parquet output (so it always holds one row per
window, the latest counts) and, optionally, sends the rows as JSON messages to an output topic (a
window is sent again by each batch that ran while it existed: the latest message per key wins).
The checkpoint keeps the aggregation state, so a second run adds what arrived since to the same
windows. `python -m jobs.topic_metrics --help` lists the flags; docs/jobs.md has examples.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rocketspark.apps.clickstream import EVENT_SCHEMA
from rocketspark.apps.common import (
    LogLevelOption,
    MasterOption,
    NamesrvOption,
    QueryRun,
    await_query,
    job_session,
    rocketmq_options,
    run_cli,
    setup_logging,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger("jobs.topic_metrics")

METRIC_COLUMNS = ("minute", "minuteEnd", "events", "views", "clicks", "purchases", "revenue")


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    namesrv: str
    topic: str
    parquet: str
    checkpoint: str
    output_topic: str | None = None
    group: str = "topic_metrics"
    window: str = "1 minute"
    starting_offsets: str = "earliest"
    max_messages_per_trigger: int | None = None
    timeout_s: float = 3600.0


def metrics(events: DataFrame, window: str) -> DataFrame:
    """Per event-time window: events, views, clicks, purchases and the purchases' revenue.

    `events` has the source's `body` (JSON) and `tags`; bodies that do not parse or have no time are
    left out."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    parsed = events.select(F.from_json(F.col("body").cast("string"), EVENT_SCHEMA).alias("e"), "tags")
    tag = F.col("tags")
    return (
        parsed.where(F.col("e.time").isNotNull())
        .groupBy(F.window(F.col("e.time"), window).alias("window"))
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.count(F.when(tag == "view", 1)).alias("views"),
            F.count(F.when(tag == "click", 1)).alias("clicks"),
            F.count(F.when(tag == "purchase", 1)).alias("purchases"),
            F.coalesce(F.sum(F.when(tag == "purchase", F.col("e.price"))), F.lit(0).cast("decimal(20,2)")).alias(
                "revenue"
            ),
        )
        .select(
            F.col("window.start").alias("minute"),
            F.col("window.end").alias("minuteEnd"),
            "events",
            "views",
            "clicks",
            "purchases",
            "revenue",
        )
    )


def batch_writer(config: MetricsConfig) -> Callable[[DataFrame, int], None]:
    """The `foreachBatch` function: Parquet (overwritten: complete mode hands over every window) and
    the output topic."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    def write(batch: DataFrame, batch_id: int) -> None:
        rows = batch.persist()
        try:
            windows = rows.count()
            rows.coalesce(1).write.mode("overwrite").parquet(config.parquet)
            if config.output_topic:
                minute = F.date_format("minute", "yyyy-MM-dd'T'HH:mm:ss'Z'")
                (
                    rows.select(
                        F.to_json(F.struct(minute.alias("minute"), *METRIC_COLUMNS[2:])).alias("body"),
                        F.lit("minute").alias("tags"),
                        minute.alias("keys"),
                    )
                    .write.format("rocketmq")
                    .options(**rocketmq_options(config.namesrv, topic=config.output_topic))
                    .mode("append")
                    .save()
                )
            log.info("batch %d: %d windows written to %s%s", batch_id, windows, config.parquet, _to_topic(config))
        finally:
            rows.unpersist()

    return write


def _to_topic(config: MetricsConfig) -> str:
    return f" and topic {config.output_topic}" if config.output_topic else ""


def start(spark: SparkSession, config: MetricsConfig) -> StreamingQuery:
    options = rocketmq_options(
        config.namesrv,
        topic=config.topic,
        consumerGroup=config.group,
        startingOffsets=config.starting_offsets,
        maxMessagesPerTrigger=config.max_messages_per_trigger,
    )
    events = spark.readStream.format("rocketmq").options(**options).load()
    return (
        metrics(events, config.window)
        .writeStream.outputMode("complete")
        .foreachBatch(batch_writer(config))
        .option("checkpointLocation", config.checkpoint)
        .trigger(availableNow=True)
        .queryName(f"topic_metrics_{config.group}")
        .start()
    )


def run(
    spark: SparkSession,
    config: MetricsConfig,
    on_progress: Callable[[dict[str, Any], QueryRun], None] | None = None,
) -> QueryRun:
    """One `availableNow` run: everything that arrived since the checkpoint's last run."""
    log.info("reading %s (group %s) into %s%s", config.topic, config.group, config.parquet, _to_topic(config))
    result = await_query(start(spark, config), config.timeout_s, on_progress)
    log.info(
        "done: %d rows in %d batches, %.1f s, %.0f rows/s",
        result.rows,
        result.batches,
        result.seconds,
        result.rows_per_second,
    )
    return result


def read_metrics(spark: SparkSession, parquet: str) -> DataFrame:
    """The Parquet output, ordered by minute."""
    return spark.read.parquet(parquet).orderBy("minute")


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command(help=__doc__)
def command(
    topic: Annotated[str, typer.Option(envvar="METRICS_TOPIC", help="the clickstream topic")],
    parquet: Annotated[str, typer.Option(envvar="METRICS_PARQUET", help="Parquet output directory")],
    checkpoint: Annotated[str, typer.Option(envvar="METRICS_CHECKPOINT", help="the query's checkpoint")],
    namesrv: NamesrvOption,
    output_topic: Annotated[
        str | None, typer.Option(envvar="METRICS_OUTPUT_TOPIC", help="also send each window here")
    ] = None,
    group: Annotated[str, typer.Option(envvar="METRICS_GROUP", help="consumer group")] = "topic_metrics",
    window: Annotated[str, typer.Option(envvar="METRICS_WINDOW", help="window length")] = "1 minute",
    starting_offsets: Annotated[
        str, typer.Option(envvar="METRICS_STARTING_OFFSETS", help="where a new checkpoint starts")
    ] = "earliest",
    max_messages_per_trigger: Annotated[
        int | None, typer.Option(envvar="METRICS_MAX_MESSAGES_PER_TRIGGER", min=1, help="cap per micro-batch")
    ] = None,
    timeout: Annotated[float, typer.Option(envvar="METRICS_TIMEOUT_S", help="fail after this many seconds")] = 3600,
    master: MasterOption = None,
    log_level: LogLevelOption = "INFO",
) -> None:
    setup_logging(log_level)
    config = MetricsConfig(
        namesrv=namesrv,
        topic=topic,
        parquet=parquet,
        checkpoint=checkpoint,
        output_topic=output_topic,
        group=group,
        window=window,
        starting_offsets=starting_offsets,
        max_messages_per_trigger=max_messages_per_trigger,
        timeout_s=timeout,
    )
    with job_session("topic_metrics", master, **{"spark.sql.shuffle.partitions": "8"}) as spark:
        run(spark, config)


def main(argv: list[str] | None = None) -> int:
    return run_cli(app, argv, "topic_metrics")
