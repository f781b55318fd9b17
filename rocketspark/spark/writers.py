"""`df.write.format("rocketmq")` and `df.writeStream.format("rocketmq")`: Spark's Arrow writers.

Each task sends its rows through the process's producer (:mod:`rocketspark.spark.writing`) and
reports what the brokers acknowledged; the driver's `commit` logs the batch's totals per queue and
`abort` what had been sent before the batch failed. Rows a failed task had sent stay in the topic
and its retry sends them again: the sink is at-least-once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from rocketspark.spark.sink_options import SinkOptions
from rocketspark.spark.writing import QueueTally, write_partition

log = logging.getLogger(__name__)


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one task wrote: its rows, and per queue the messages and first and last queue offsets."""

    rows: int
    queues: QueueTally


def _write(options: SinkOptions, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
    context = TaskContext.get()
    rows, queues = write_partition(options, iterator, context.partitionId() if context else None)
    return SinkCommitMessage(rows, queues)


def describe(messages: Sequence[WriterCommitMessage | None]) -> str:
    """Rows and per-queue offsets of the tasks' messages, for the driver's log."""
    done = [m for m in messages if isinstance(m, SinkCommitMessage)]
    totals: QueueTally = {}
    for message in done:
        for key, (count, first, last) in message.queues.items():
            had = totals.get(key)
            totals[key] = (
                (count, first, last) if had is None else (had[0] + count, min(had[1], first), max(had[2], last))
            )
    per_queue = ", ".join(f"{t}@{b}#{q}: {c} ({f}..{last})" for (t, b, q), (c, f, last) in sorted(totals.items()))
    rows = sum(m.rows for m in done)
    return f"{rows} rows from {len(done)} of {len(messages)} tasks" + (f"; {per_queue}" if per_queue else "")


class RocketMQBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return _write(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("wrote %s", describe(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("the write failed; before it did, the brokers acknowledged %s", describe(messages))


class RocketMQStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return _write(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("batch %d wrote %s", batchId, describe(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("batch %d failed; before it did, the brokers acknowledged %s", batchId, describe(messages))
