"""Copy the messages a topic stored between two times to another topic (a backfill).

A bounded read (`spark.read.format("rocketmq")` with `startingTimestamp` and `endingTimestamp`:
every queue from its first message stored at or after `--start` to before its first message stored
at or after `--end`) written with the sink to `--target`, with body, tags, keys and user properties.
Each copy carries the property `REPLAY_ORIGIN` = `topic/broker/queueId/queueOffset` of the original;
unless `--no-dedupe` is given, messages whose origin the target already holds are skipped, so running
the same replay again copies nothing new (and a replay that failed half-way can simply be run again).
`python -m jobs.replay_range --help` lists the flags; docs/jobs.md has examples.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from rocketspark.apps.common import (
    JobError,
    LogLevelOption,
    MasterOption,
    NamesrvOption,
    format_ms,
    job_session,
    parse_time,
    rocketmq_options,
    run_cli,
    setup_logging,
    topic_exists,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger("jobs.replay_range")

ORIGIN = "REPLAY_ORIGIN"


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    namesrv: str
    source: str
    target: str
    start_ms: int
    end_ms: int
    tags: str = "*"
    dedupe: bool = True


@dataclass(frozen=True, slots=True)
class ReplayResult:
    in_range: int
    already_copied: int
    copied: int


def origin() -> Column:
    """`topic/broker/queueId/queueOffset` of a message read by the source."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    return F.concat_ws("/", "topic", "brokerName", F.col("queueId").cast("string"), F.col("queueOffset").cast("string"))


def copied_origins(spark: SparkSession, config: ReplayConfig) -> DataFrame | None:
    """The origins of the copies the target already holds (None when the target does not exist)."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    if not topic_exists(config.namesrv, config.target):
        return None
    options = rocketmq_options(config.namesrv, topic=config.target)
    return (
        spark.read.format("rocketmq")
        .options(**options)
        .load()
        .select(F.col("properties").getItem(ORIGIN).alias("origin"))
        .where(F.col("origin").isNotNull())
        .distinct()
    )


def run(spark: SparkSession, config: ReplayConfig) -> ReplayResult:
    from pyspark.sql import functions as F  # noqa: PLC0415

    if config.end_ms <= config.start_ms:
        raise JobError(f"--end ({format_ms(config.end_ms)}) must be after --start ({format_ms(config.start_ms)})")
    if config.source == config.target:
        raise JobError("--source and --target must be different topics")
    log.info(
        "replaying %s [%s, %s) into %s",
        config.source,
        format_ms(config.start_ms),
        format_ms(config.end_ms),
        config.target,
    )
    options = rocketmq_options(
        config.namesrv,
        topic=config.source,
        tags=config.tags,
        startingTimestamp=config.start_ms,
        startingOffsetsByTimestampStrategy="latest",  # a queue with nothing that new adds no message
        endingTimestamp=config.end_ms,
    )
    messages = spark.read.format("rocketmq").options(**options).load()
    rows = messages.select(
        "body",
        "tags",
        "keys",
        F.map_concat(
            F.map_filter("properties", lambda key, _value: key != F.lit(ORIGIN)),
            F.create_map(F.lit(ORIGIN), origin()),
        ).alias("properties"),
        origin().alias("origin"),
    ).persist()
    try:
        in_range = rows.count()
        to_copy = rows
        done = copied_origins(spark, config) if config.dedupe else None
        if done is not None:
            to_copy = rows.join(done, "origin", "left_anti").persist()
        copies = to_copy.count()
        log.info("%d messages in the range, %d of them not yet in %s", in_range, copies, config.target)
        if copies:
            (
                to_copy.drop("origin")
                .write.format("rocketmq")
                .options(**rocketmq_options(config.namesrv, topic=config.target))
                .mode("append")
                .save()
            )
        if to_copy is not rows:
            to_copy.unpersist()
    finally:
        rows.unpersist()
    log.info("copied %d messages from %s to %s", copies, config.source, config.target)
    return ReplayResult(in_range=in_range, already_copied=in_range - copies, copied=copies)


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command(help=__doc__)
def command(
    source: Annotated[str, typer.Option(envvar="REPLAY_SOURCE", help="the topic to copy from")],
    target: Annotated[str, typer.Option(envvar="REPLAY_TARGET", help="the topic to copy to")],
    start: Annotated[
        str, typer.Option(envvar="REPLAY_START", help="first store time: ISO 8601 (UTC if no zone) or ms")
    ],
    end: Annotated[str, typer.Option(envvar="REPLAY_END", help="end of the range (excluded), as --start")],
    namesrv: NamesrvOption,
    tags: Annotated[str, typer.Option(envvar="REPLAY_TAGS", help="only these tags: '*' or 'a || b'")] = "*",
    dedupe: Annotated[
        bool, typer.Option("--dedupe/--no-dedupe", envvar="REPLAY_DEDUPE", help="skip messages already copied")
    ] = True,
    master: MasterOption = None,
    log_level: LogLevelOption = "INFO",
) -> None:
    setup_logging(log_level)
    try:
        start_ms, end_ms = parse_time(start), parse_time(end)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    config = ReplayConfig(
        namesrv=namesrv, source=source, target=target, start_ms=start_ms, end_ms=end_ms, tags=tags, dedupe=dedupe
    )
    with job_session("replay_range", master) as spark:
        run(spark, config)


def main(argv: list[str] | None = None) -> int:
    return run_cli(app, argv, "replay_range")
