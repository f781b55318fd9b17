"""Export a topic to Parquet partitioned by date, incrementally (`availableNow`).

Each run reads what arrived since the previous run (the checkpoint holds the position; the
consumer group's offsets on the brokers mirror it) and appends it to the Parquet directory,
partitioned by `date`, the UTC day (the session's time zone) the broker stored the message. Spark's
file sink keeps a log of the files each batch committed (`_spark_metadata`), so a batch that is run
again after a failure does not add its rows twice; read the directory with Spark to get exactly
that view. `python -m jobs.archive_topic --help` lists the flags; docs/jobs.md has examples.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

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

log = logging.getLogger("jobs.archive_topic")

#: the source's columns kept in the archive, and `date`
ARCHIVE_COLUMNS = (
    "topic",
    "brokerName",
    "queueId",
    "queueOffset",
    "msgId",
    "tags",
    "keys",
    "body",
    "bornTimestamp",
    "storeTimestamp",
    "bornHost",
    "properties",
)


@dataclass(frozen=True, slots=True)
class ArchiveConfig:
    namesrv: str
    topic: str
    output: str
    checkpoint: str
    group: str = "archive_topic"
    starting_offsets: str = "earliest"
    max_messages_per_trigger: int | None = None
    timeout_s: float = 3600.0


def archive_rows(messages: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F  # noqa: PLC0415

    return messages.select(*ARCHIVE_COLUMNS, F.to_date("storeTimestamp").alias("date"))


def run(spark: SparkSession, config: ArchiveConfig) -> QueryRun:
    """One `availableNow` run: every message that arrived since the last run, appended to Parquet."""
    options = rocketmq_options(
        config.namesrv,
        topic=config.topic,
        consumerGroup=config.group,
        startingOffsets=config.starting_offsets,
        maxMessagesPerTrigger=config.max_messages_per_trigger,
    )
    log.info("archiving %s (group %s) into %s", config.topic, config.group, config.output)
    messages = spark.readStream.format("rocketmq").options(**options).load()
    query = (
        archive_rows(messages)
        .writeStream.format("parquet")
        .partitionBy("date")
        .option("path", config.output)
        .option("checkpointLocation", config.checkpoint)
        .trigger(availableNow=True)
        .queryName(f"archive_{config.group}")
        .start()
    )
    result = await_query(query, config.timeout_s)
    log.info(
        "archived %d messages of %s in %d batches (%.1f s)", result.rows, config.topic, result.batches, result.seconds
    )
    return result


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command(help=__doc__)
def command(
    topic: Annotated[str, typer.Option(envvar="ARCHIVE_TOPIC", help="the topic to export")],
    output: Annotated[str, typer.Option(envvar="ARCHIVE_OUTPUT", help="Parquet directory (partitioned by date)")],
    checkpoint: Annotated[str, typer.Option(envvar="ARCHIVE_CHECKPOINT", help="the query's checkpoint")],
    namesrv: NamesrvOption,
    group: Annotated[str, typer.Option(envvar="ARCHIVE_GROUP", help="consumer group")] = "archive_topic",
    starting_offsets: Annotated[
        str, typer.Option(envvar="ARCHIVE_STARTING_OFFSETS", help="where a new checkpoint starts")
    ] = "earliest",
    max_messages_per_trigger: Annotated[
        int | None, typer.Option(envvar="ARCHIVE_MAX_MESSAGES_PER_TRIGGER", min=1, help="cap per micro-batch")
    ] = None,
    timeout: Annotated[float, typer.Option(envvar="ARCHIVE_TIMEOUT_S", help="fail after this many seconds")] = 3600,
    master: MasterOption = None,
    log_level: LogLevelOption = "INFO",
) -> None:
    setup_logging(log_level)
    config = ArchiveConfig(
        namesrv=namesrv,
        topic=topic,
        output=output,
        checkpoint=checkpoint,
        group=group,
        starting_offsets=starting_offsets,
        max_messages_per_trigger=max_messages_per_trigger,
        timeout_s=timeout,
    )
    with job_session("archive_topic", master) as spark:
        run(spark, config)


def main(argv: list[str] | None = None) -> int:
    return run_cli(app, argv, "archive_topic")
