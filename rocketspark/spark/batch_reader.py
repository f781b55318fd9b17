"""`RocketMQBatchReader`: `spark.read.format("rocketmq")`, a bounded DataFrame between two positions."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from rocketspark.spark.options import SourceOptions
from rocketspark.spark.planning import plan_partitions
from rocketspark.spark.positions import resolve
from rocketspark.spark.queue_view import QueueView
from rocketspark.spark.reading import read_partition


class RocketMQBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        """Resolved on the driver when Spark plans the read: from `startingOffsets` (or
        `startingTimestamp`, `startingOffsetsByTimestamp`) to `endingOffsets` (or `endingTimestamp`,
        `endingOffsetsByTimestamp`). Every queue's broker must answer (after retries): a bounded
        read never leaves a queue out."""
        view = QueueView(self.options)
        queues = view.queues(must_exist=True)
        group = self.options.consumer_group
        start = resolve(view, queues, self.options.starting, group, strict=True)
        end = resolve(view, queues, self.options.ending, group)
        view.require_reachable("plan the batch read")
        return plan_partitions(start, {q: max(end[q], start[q]) for q in queues}, self.options.partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)
