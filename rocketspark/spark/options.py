"""The source's options, parsed and checked once on the driver (docs/spark.md describes each)."""

from __future__ import annotations

import enum
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rocketspark.errors import ConfigError, ValidationError
from rocketspark.message.filter import parse_tag_expression
from rocketspark.message.validation import validate_group, validate_topic
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.signing import SessionCredentials
from rocketspark.spark import versions
from rocketspark.spark.option_values import (
    CREDENTIAL_OPTIONS,
    TLS_OPTIONS,
    bool_option,
    credentials_option,
    int_option,
    lowered_options,
    namesrv_option,
    tls_option,
)
from rocketspark.spark.source import offsets as offset_dicts
from rocketspark.spark.source.planning import PartitionRules
from rocketspark.spark.source.trigger_limits import TriggerLimits, parse_duration_ms

log = logging.getLogger(__name__)

DEFAULT_PULL_BATCH_SIZE = 10_000
DEFAULT_PULL_TIMEOUT_MS = 120_000

#: every option the source reads (lower case); anything else is a mistake worth an error
KNOWN_OPTIONS = frozenset(
    {
        "nameserver",
        "namesrvaddr",
        "topic",
        "topics",
        "topicpattern",
        "tags",
        "consumergroup",
        "startingoffsets",
        "startingtimestamp",
        "startingoffsetsbytimestamp",
        "startingoffsetsbytimestampstrategy",
        "endingoffsetsbytimestamp",
        "endingoffsets",
        "endingtimestamp",
        "maxmessagespertrigger",
        "maxoffsetspertrigger",
        "minmessagespertrigger",
        "minoffsetspertrigger",
        "maxtriggerdelay",
        "maxbytespertrigger",
        "numpartitions",
        "minpartitions",
        "maxrecordsperpartition",
        "failondataloss",
        "pullbatchsize",
        "pulltimeoutms",
        "path",  # what load(path) passes; not used
    }
    | CREDENTIAL_OPTIONS
    | TLS_OPTIONS
)


class Position(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    GROUP = "group"  # the consumer group's committed offsets on the brokers
    OFFSETS = "offsets"  # a JSON map of queue offsets
    TIMESTAMP = "timestamp"  # the first message stored at or after a time
    TIMESTAMPS = "timestamps"  # the same per queue, from a JSON map of queue timestamps


@dataclass(frozen=True, slots=True)
class StartOrEnd:
    position: Position
    #: OFFSETS: the queues' offsets; TIMESTAMPS: the queues' timestamps (ms)
    offsets: tuple[tuple[MessageQueue, int], ...] = ()
    timestamp_ms: int | None = None
    #: a start by time fails when a queue holds messages but none stored at or after its time
    #: (startingOffsetsByTimestampStrategy=error); else such a queue starts at its latest offset
    fail_if_none_newer: bool = False

    def offset_map(self) -> dict[MessageQueue, int]:
        return dict(self.offsets)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    namesrv_addr: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    tags: str = "*"
    consumer_group: str | None = None
    starting: StartOrEnd = StartOrEnd(Position.GROUP)
    ending: StartOrEnd = StartOrEnd(Position.LATEST)
    trigger: TriggerLimits = field(default_factory=TriggerLimits)
    partitions: PartitionRules = field(default_factory=PartitionRules)
    fail_on_data_loss: bool = True
    pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE
    pull_timeout_ms: int = DEFAULT_PULL_TIMEOUT_MS
    #: signs every request (ACL 1.0); its repr shows the access key only
    credentials: SessionCredentials | None = None
    #: every connection is TLS, the servers' certificates verified against `tls_trust` (useTLS, tlsTrust)
    use_tls: bool = False
    tls_trust: str | None = None

    def pattern(self) -> re.Pattern[str] | None:
        return re.compile(self.topic_pattern) if self.topic_pattern is not None else None


def _position(
    options: Mapping[str, str],
    offsets_name: str,
    timestamp_name: str,
    default: Position,
    *,
    allowed: set[Position],
    by_timestamp_name: str,
) -> StartOrEnd:
    raw = options.get(offsets_name.lower())
    stamp = int_option(options, timestamp_name, minimum=0)
    by_time = options.get(by_timestamp_name.lower())
    given = [
        n for n, v in ((offsets_name, raw), (timestamp_name, stamp), (by_timestamp_name, by_time)) if v is not None
    ]
    if len(given) > 1:
        raise ConfigError(f"give {' or '.join(given)}, {'not both' if len(given) == 2 else 'only one'}")
    if stamp is not None:
        return StartOrEnd(Position.TIMESTAMP, timestamp_ms=stamp)
    if by_time is not None:
        stamps = offset_dicts.from_dict(_json(by_timestamp_name, by_time), source=f"option {by_timestamp_name}")
        if any(t < 0 for t in stamps.values()):
            raise ConfigError(
                f'option {by_timestamp_name} takes {{"topic":{{"brokerName":{{"queueId":timestampMs}}}}}}'
            )
        return StartOrEnd(Position.TIMESTAMPS, tuple(sorted(stamps.items())))
    if raw is None:
        return StartOrEnd(default)
    text = raw.strip()
    if text.startswith("{"):
        offsets = offset_dicts.from_dict(_json(offsets_name, text), source=f"option {offsets_name}")
        return StartOrEnd(Position.OFFSETS, tuple(sorted(offsets.items())))
    try:
        position = Position(text.lower())
    except ValueError:
        position = None
    by_name = (Position.EARLIEST, Position.LATEST, Position.GROUP)
    if position is None or position not in allowed or position not in by_name:
        words = " or ".join(sorted(p.value for p in allowed if p in by_name))
        raise ConfigError(
            f'option {offsets_name} must be {words}, or JSON {{"topic":{{"brokerName":{{"queueId":offset}}}}}}; '
            f"got {raw!r}"
        )
    return StartOrEnd(position)


def _json(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"option {name} is not valid JSON: {exc}") from None


def _with_strategy(lowered: Mapping[str, str], starting: StartOrEnd) -> StartOrEnd:
    """startingOffsetsByTimestampStrategy: `error` (the default, as Kafka's for every start by time)
    or `latest`."""
    raw = lowered.get("startingoffsetsbytimestampstrategy")
    strategy = (raw or "").strip().lower() or "error"
    if strategy not in ("error", "latest"):
        raise ConfigError(f"option startingOffsetsByTimestampStrategy must be error or latest, got {raw!r}")
    if starting.position not in (Position.TIMESTAMP, Position.TIMESTAMPS):
        if raw is not None:
            raise ConfigError(
                "option startingOffsetsByTimestampStrategy applies with startingTimestamp or startingOffsetsByTimestamp"
            )
        return starting
    return StartOrEnd(
        starting.position, starting.offsets, starting.timestamp_ms, fail_if_none_newer=strategy == "error"
    )


def _topics(lowered: Mapping[str, str]) -> tuple[tuple[str, ...], str | None]:
    chosen = [n for n in ("topic", "topics", "topicPattern") if n.lower() in lowered]
    if len(chosen) != 1:
        raise ConfigError(
            "exactly one of the options topic, topics or topicPattern is required"
            + (f"; got {', '.join(chosen)}" if chosen else "")
        )
    if chosen[0] == "topicPattern":
        pattern = lowered["topicpattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"option topicPattern is not a regular expression: {exc}") from None
        return (), pattern
    topics = tuple(sorted({t.strip() for t in lowered[chosen[0].lower()].split(",") if t.strip()}))
    if not topics:
        raise ConfigError(f"option {chosen[0]} names no topic")
    if chosen[0] == "topic" and len(topics) > 1:
        raise ConfigError("option topic names one topic; use topics for a comma-separated list")
    for topic in topics:
        try:
            validate_topic(topic)
        except ValidationError as exc:
            raise ConfigError(f"option {chosen[0]}: {exc}") from None
    return topics, None


def _tags(lowered: Mapping[str, str]) -> str:
    tags = lowered.get("tags", "*").strip() or "*"
    try:
        parse_tag_expression(tags)
    except ValidationError as exc:
        raise ConfigError(f"option tags: {exc}") from None
    return tags


def _group(lowered: Mapping[str, str], streaming: bool) -> str | None:
    group = lowered.get("consumergroup")
    if group is None:
        if streaming:
            raise ConfigError(
                "option consumerGroup is required for streaming reads: it is the query's identity on the "
                "brokers, as a RocketMQ consumer group is (its offsets show the query's progress and lag)"
            )
        return None
    try:
        validate_group(group.strip())
    except ValidationError as exc:
        raise ConfigError(f"option consumerGroup: {exc}") from None
    return group.strip()


def _aliased_int(lowered: Mapping[str, str], name: str, alias: str) -> int | None:
    if name.lower() in lowered and alias.lower() in lowered:
        raise ConfigError(f"options {name} and {alias} mean the same thing; give one")
    return int_option(lowered, name if name.lower() in lowered else alias, minimum=1)


#: the options of a stream's trigger limits, which PySpark passes the source only with admission control
TRIGGER_LIMIT_OPTIONS = (
    "maxMessagesPerTrigger",
    "maxOffsetsPerTrigger",
    "maxBytesPerTrigger",
    "minMessagesPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
)


def _trigger_limits(lowered: Mapping[str, str], streaming: bool) -> TriggerLimits:
    if not streaming:
        for name in ("minMessagesPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "maxBytesPerTrigger"):
            if name.lower() in lowered:
                raise ConfigError(f"option {name} applies to streaming reads (spark.readStream) only")
    else:  # without admission control Spark cannot tell the source that Trigger.Once must read all
        for name in TRIGGER_LIMIT_OPTIONS:
            if name.lower() in lowered:
                versions.require(versions.ADMISSION_CONTROL, f"option {name}", "streaming admission control")
    limits = TriggerLimits(
        max_messages=_aliased_int(lowered, "maxMessagesPerTrigger", "maxOffsetsPerTrigger"),
        max_bytes=int_option(lowered, "maxBytesPerTrigger", minimum=1),
        min_messages=_aliased_int(lowered, "minMessagesPerTrigger", "minOffsetsPerTrigger"),
    )
    delay = lowered.get("maxtriggerdelay")
    if delay is None:
        return limits
    try:
        delay_ms = parse_duration_ms(delay)
    except ValueError as exc:
        raise ConfigError(f"option maxTriggerDelay: {exc}") from None
    if limits.min_messages is None:  # as Kafka's source, which reads the delay only with a minimum
        log.warning("option maxTriggerDelay is ignored: it applies with minMessagesPerTrigger (minOffsetsPerTrigger)")
        return limits
    return TriggerLimits(limits.max_messages, limits.max_bytes, limits.min_messages, delay_ms)


def _partition_rules(lowered: Mapping[str, str]) -> PartitionRules:
    rules = PartitionRules(
        num_partitions=int_option(lowered, "numPartitions", minimum=1),
        min_partitions=int_option(lowered, "minPartitions", minimum=1),
        max_records=int_option(lowered, "maxRecordsPerPartition", minimum=1),
    )
    if rules.num_partitions is not None and rules.splits:
        raise ConfigError(
            "option numPartitions groups whole queues into fewer partitions, minPartitions and "
            "maxRecordsPerPartition split queue ranges into more: give numPartitions or the other two"
        )
    return rules


def parse(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check every option; ConfigError (a ValueError) says which one is wrong and why."""
    lowered = lowered_options(options, KNOWN_OPTIONS)
    use_tls, tls_trust = tls_option(lowered)
    namesrv = namesrv_option(lowered)

    topics, pattern = _topics(lowered)
    tags = _tags(lowered)
    group = _group(lowered, streaming)

    if streaming:
        for batch_only in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if batch_only.lower() in lowered:
                raise ConfigError(f"option {batch_only} applies to batch reads (spark.read) only")
    start_default = Position.GROUP if streaming else Position.EARLIEST
    start_allowed = {Position.EARLIEST, Position.LATEST, Position.GROUP, Position.OFFSETS, Position.TIMESTAMP}
    if not streaming and group is None:
        start_allowed.discard(Position.GROUP)
    starting = _position(
        lowered,
        "startingOffsets",
        "startingTimestamp",
        start_default,
        allowed=start_allowed,
        by_timestamp_name="startingOffsetsByTimestamp",
    )
    starting = _with_strategy(lowered, starting)
    ending = _position(
        lowered,
        "endingOffsets",
        "endingTimestamp",
        Position.LATEST,
        allowed={Position.LATEST, Position.OFFSETS},
        by_timestamp_name="endingOffsetsByTimestamp",
    )
    if any(offset == offset_dicts.EARLIEST for _, offset in ending.offsets):
        raise ConfigError("option endingOffsets may not use -2 (earliest)")

    return SourceOptions(
        namesrv_addr=namesrv,
        topics=topics,
        topic_pattern=pattern,
        tags=tags,
        consumer_group=group,
        starting=starting,
        ending=ending,
        trigger=_trigger_limits(lowered, streaming),
        partitions=_partition_rules(lowered),
        fail_on_data_loss=bool_option(lowered, "failOnDataLoss", True),
        pull_batch_size=int_option(lowered, "pullBatchSize", minimum=1) or DEFAULT_PULL_BATCH_SIZE,
        pull_timeout_ms=int_option(lowered, "pullTimeoutMs", minimum=1) or DEFAULT_PULL_TIMEOUT_MS,
        credentials=credentials_option(lowered),
        use_tls=use_tls,
        tls_trust=tls_trust,
    )
