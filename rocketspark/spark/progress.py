"""A stream's lag from its `StreamingQueryProgress`: how far each queue's batch end is behind the
latest offsets the source saw when it planned the batch (Kafka's source calls it
`offsetsBehindLatest`). The source reports those latest offsets through `reportLatestOffset`, which
PySpark calls from 4.2 on (`rocketspark.spark.versions`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark import versions
from rocketspark.spark.source import offsets as offset_dicts


def _offsets(value: str | Mapping[str, Any] | None) -> dict[MessageQueue, int]:
    if value is None:
        return {}
    parsed = json.loads(value) if isinstance(value, str) else value
    return offset_dicts.from_dict(parsed or {}, source="progress offsets")


def queue_lag(progress: Any, source: int = 0) -> dict[MessageQueue, int]:
    """Per queue, the messages between the end of the progress's batch and the latest offsets.

    `progress` is a `StreamingQueryProgress` (`query.lastProgress`) or its dict; `source` picks the
    rocketmq source among the query's sources. SparkVersionError on PySpark before 4.2, whose
    progress has no latest offsets (`rocketspark group progress` shows the lag of the query's group)."""
    versions.require(  # before, the progress shows the batch's end as the latest offsets
        versions.ADMISSION_CONTROL,
        "the lag from a query's progress",
        "its latestOffset, from reportLatestOffset",
        "upgrade PySpark, or see the lag of the query's consumerGroup with rocketspark group progress GROUP",
    )
    entry = progress["sources"][source]
    end = _offsets(entry["endOffset"])
    latest = _offsets(entry["latestOffset"])
    return {queue: max(0, offset - end.get(queue, offset)) for queue, offset in latest.items()}


def lag_behind_latest(progress: Any, source: int = 0) -> int:
    """The messages the query is behind, summed over its queues."""
    return sum(queue_lag(progress, source).values())
