"""`df.write.format("rocketmq")` and `df.writeStream.format("rocketmq")`: Spark's Arrow writers.

Each task sends its rows through the process's producer (:mod:`rocketspark.spark.sink.writing`) and
reports what the brokers acknowledged; the driver's `commit` logs the batch's totals per queue and
`abort` what had been sent before the batch failed. Rows a failed task had sent stay in the topic
and its retry sends them again. With idempotent writes (the default for streaming writes) the retry
sends them with the same ids to the same queues (:mod:`rocketspark.spark.sink.ids`), which brokers
with a duplicate window store once (docs/spark.md, "Exactly-once"): the task's scope is the query
and batch id Spark sets as local properties of a micro-batch's tasks, or a batch write's
`txnAppId` and `txnVersion`. Without them the sink is at-least-once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from rocketspark.errors import ConfigError
from rocketspark.spark.sink.ids import IdScope
from rocketspark.spark.sink.options import SinkOptions
from rocketspark.spark.sink.writing import QueueTally, write_partition
from rocketspark.spark.versions import StreamArrowWriter

log = logging.getLogger(__name__)


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one task wrote: its rows, and per queue the messages and first and last queue offsets."""

    rows: int
    queues: QueueTally


QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def id_scope(options: SinkOptions, streaming: bool, context: TaskContext | None) -> IdScope | None:
    """The task's deterministic ids, or None when the write sends random ones."""
    if not options.idempotent(streaming):
        return None
    if context is None:
        raise ConfigError("idempotent writes need a Spark task context")
    partition = context.partitionId()
    if options.txn_app_id is not None:
        return IdScope(("txn", options.txn_app_id, options.txn_version), partition)
    query_id, batch_id = context.getLocalProperty(QUERY_ID_PROPERTY), context.getLocalProperty(BATCH_ID_PROPERTY)
    if not query_id or batch_id is None:
        raise ConfigError(
            f"idempotent writes need the task properties {QUERY_ID_PROPERTY} and {BATCH_ID_PROPERTY}, which "
            "Spark sets in micro-batch queries; set idempotentWrites=false (or txnAppId and txnVersion)"
        )
    return IdScope(("stream", query_id, int(batch_id)), partition)


def _write(options: SinkOptions, iterator: Iterator[pa.RecordBatch], streaming: bool) -> SinkCommitMessage:
    context = TaskContext.get()
    ids = id_scope(options, streaming, context)
    rows, queues = write_partition(options, iterator, context.partitionId() if context else None, ids)
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
        options.check_kind(streaming=False)  # on the driver, before any task starts
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return _write(self.options, iterator, streaming=False)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("wrote %s", describe(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("the write failed; before it did, the brokers acknowledged %s", describe(messages))


class RocketMQStreamWriter(StreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return _write(self.options, iterator, streaming=True)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("batch %d wrote %s", batchId, describe(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("batch %d failed; before it did, the brokers acknowledged %s", batchId, describe(messages))
