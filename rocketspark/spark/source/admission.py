"""The stream reader on PySpark 4.2 and newer: streaming admission control (SPARK-55304).

Spark passes `latestOffset` the batch's start and a read limit (the one `getDefaultReadLimit`
returned, or ReadAllAvailable for Trigger.Once), shows `reportLatestOffset` in every progress, and
runs Trigger.AvailableNow through `prepareForTriggerAvailableNow` (several batches up to what was
there at the start, waiting for brokers away). Imported only on those versions: the module
`pyspark.sql.streaming.datasource` is new in 4.2 (`rocketspark.spark.versions`).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from rocketspark.spark.source.queue_view import QueueView
from rocketspark.spark.source.stream_reader import RocketMQStreamReader


class AdmissionStreamReader(RocketMQStreamReader, SupportsTriggerAvailableNow):
    def prepareForTriggerAvailableNow(self) -> None:
        view = QueueView(self.options)
        self._target = view.max_offsets(self._queues(view, must_exist=True))

    def getDefaultReadLimit(self) -> ReadLimit:
        """Any limit but ReadAllAvailable when trigger limits are set: Spark hands it back to
        `latestOffset`, which applies the options' limits (`rocketspark.spark.source.trigger_limits`)
        unless Spark passes ReadAllAvailable instead (Trigger.Once)."""
        limits = self.options.trigger
        if limits.max_messages is not None:
            return ReadMaxRows(limits.max_messages)
        if limits.max_bytes is not None:
            return ReadMaxBytes(limits.max_bytes)
        if limits.min_messages is not None:
            return ReadMinRows(limits.min_messages)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The queues' max offsets when the batch was planned: Spark shows them as the source's
        `latestOffset` in every `StreamingQueryProgress`, beside the batch's `endOffset`."""
        return self._latest

    def latestOffset(self, start: dict[Any, Any], limit: ReadLimit) -> dict[str, Any]:  # type: ignore[override]
        """The end of the next micro-batch from `start` (see `RocketMQStreamReader.next_end`)."""
        return self.next_end(start, limited=not isinstance(limit, ReadAllAvailable))
