"""Spark's Arrow writers for `transactional=true`: tasks send half messages and return their
handles; the driver's `commit` and `abort` end them (:mod:`rocketspark.spark.sink.transactional.commit`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from rocketspark.errors import ConfigError
from rocketspark.spark.sink.options import SinkOptions
from rocketspark.spark.sink.transactional.commit import abort_batch, commit_batch
from rocketspark.spark.sink.transactional.options import require_log
from rocketspark.spark.sink.transactional.record import forget_old_batches, stream_record_path, write_record_path
from rocketspark.spark.sink.transactional.sending import TaskHalves, send_task
from rocketspark.spark.sink.writers import BATCH_ID_PROPERTY, QUERY_ID_PROPERTY, id_scope
from rocketspark.spark.versions import StreamArrowWriter

log = logging.getLogger(__name__)


@dataclass
class TransactionalCommitMessage(WriterCommitMessage):
    """One task attempt's half messages."""

    task: TaskHalves


def _tasks(messages: Sequence[WriterCommitMessage | None]) -> list[TaskHalves]:
    return [m.task for m in messages if isinstance(m, TransactionalCommitMessage)]


def _write(options: SinkOptions, iterator: Iterator[pa.RecordBatch], streaming: bool, path: str | None) -> TaskHalves:
    context = TaskContext.get()
    if context is None:
        raise ConfigError("transactional writes run in Spark tasks")
    if path is None:  # a streaming batch: its record is named by the query and batch ids
        query_id, batch_id = context.getLocalProperty(QUERY_ID_PROPERTY), context.getLocalProperty(BATCH_ID_PROPERTY)
        if not query_id or batch_id is None:
            raise ConfigError(f"a streaming write's tasks carry {QUERY_ID_PROPERTY} and {BATCH_ID_PROPERTY}")
        path = stream_record_path(require_log(options.transaction_log), query_id, int(batch_id))
    ids = id_scope(options, streaming, context)
    return send_task(options, iterator, context.partitionId(), ids, path)


def _describe(tasks: Sequence[TaskHalves]) -> str:
    halves = sum(span.count for t in tasks for span in t.ranges)
    return f"{sum(t.rows for t in tasks)} rows, {halves} half messages of {len(tasks)} tasks"


class TransactionalBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        options.check_kind(streaming=False)  # txnAppId and txnVersion are set
        log_dir = require_log(options.transaction_log)
        self.options = options
        self.record_path = write_record_path(log_dir, f"txn-{options.txn_app_id}-{options.txn_version}")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TransactionalCommitMessage:
        return TransactionalCommitMessage(_write(self.options, iterator, False, self.record_path))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        tasks = _tasks(messages)
        commit_batch(self.options, tasks)
        log.info("committed %s", _describe(tasks))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        tasks = _tasks(messages)
        abort_batch(self.options, tasks)
        log.warning("the write failed: rolled back %s", _describe(tasks))


class TransactionalStreamWriter(StreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        require_log(options.transaction_log)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TransactionalCommitMessage:
        return TransactionalCommitMessage(_write(self.options, iterator, True, None))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks = _tasks(messages)
        commit_batch(self.options, tasks)
        log.info("batch %d committed %s", batchId, _describe(tasks))
        if tasks:
            forgotten = forget_old_batches(tasks[0].record_path)
            if forgotten:
                log.info("deleted the transaction records of %d batches before batch %d", forgotten, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks = _tasks(messages)
        abort_batch(self.options, tasks)
        log.warning("batch %d failed: rolled back %s", batchId, _describe(tasks))
