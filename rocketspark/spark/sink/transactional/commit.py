"""Driver side of a transactional write: `commit` and `abort` of a batch, from its tasks' halves.

Spark runs each in a Python worker with a fresh writer, so everything they need travels in the
tasks' commit messages and the batch record. `commit` reads the tasks' half messages sent alone back
from their offset ranges (ranges.py) and writes the record (`committing`, every attempt and range)
before it ends any half message, commits them all (batches of them by range, the others one by one:
ending.py), then marks the record `committed` and rolls back the half messages of other attempts it
was handed. If the record says a commit began already (a driver that
died mid-commit, the batch run again after the restart), that commit is finished instead and every
half message of the new run is rolled back: a consumer sees the batch's rows once. A record that
says `committed` (the batch replayed after Spark lost its commit) ends nothing again: every END it
lists was stored, and an Apache broker stores a commit each time it gets one. The rows of a task
attempt reach each queue in their order (ending.py). `abort` records its attempts as rolled back and
rolls their half messages back.
Both decide under the record's lock, and `commit` holds it through its ENDs: of two commits of one
batch at once (a stopped query's commit runner still at work beside the restarted query's) the
second finds the batch committed, and ends nothing. A commit that finds a `committing` record
(its driver died among the ENDs) ends only the rows not in their queues yet (finishing.py).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from rocketspark.client.producer.transaction import AsyncTransactionProducer, HalfMessage, TransactionStatus
from rocketspark.errors import RocketMQError
from rocketspark.spark import cluster
from rocketspark.spark.sink.options import SinkOptions
from rocketspark.spark.sink.transactional.ending import end_halves, end_ranges
from rocketspark.spark.sink.transactional.finishing import finish_commit
from rocketspark.spark.sink.transactional.listener import using_producer
from rocketspark.spark.sink.transactional.ranges import resolve
from rocketspark.spark.sink.transactional.record import BatchRecord, HalfRange, RecordState, load, locked, save
from rocketspark.spark.sink.transactional.sending import TaskHalves
from rocketspark.spark.sink.transactional.stored import queue_starts

log = logging.getLogger(__name__)


def _record_path(tasks: Sequence[TaskHalves]) -> str:
    paths = {task.record_path for task in tasks}
    if len(paths) != 1:
        raise RuntimeError(f"the tasks of one batch name {len(paths)} transaction records: {sorted(paths)}")
    return paths.pop()


def _ranges_outside(tasks: Sequence[TaskHalves], attempts: frozenset[str]) -> list[HalfRange]:
    return [span for task in tasks if task.attempt not in attempts for span in task.ranges]


def commit_batch(options: SinkOptions, tasks: Sequence[TaskHalves]) -> BatchRecord | None:
    """Commit the batch (or finish the commit a previous driver began); the record committed."""
    if not tasks:
        return None
    path = _record_path(tasks)
    timeout_ms = options.send_timeout_ms
    with using_producer(options) as producer:
        with locked(path):  # held through the ENDs: a second commit runner waits, then finds it committed
            record = load(path)  # TransactionRecordError: a record that cannot be read ends nothing
            if record is None or not record.commits:
                ranges = tuple(span for task in tasks for span in task.ranges)
                singles = [span for span in ranges if not span.batched]
                halves = cluster.run(resolve(producer, singles, timeout_ms), None)
                starts = cluster.run(queue_starts(producer, halves, timeout_ms))
                attempts = frozenset(task.attempt for task in tasks)
                record = BatchRecord(RecordState.COMMITTING, attempts, ranges, starts)
                save(path, record)  # before any half message is ended
                to_end: Sequence[Sequence[HalfMessage]] | None = halves
            else:
                to_end = None  # a commit begun before: those not in their queues yet
            if record.state is RecordState.COMMITTED:
                # a replayed batch: every END was stored. Not again: Apache RocketMQ stores each END it gets
                log.info("transaction record %s: the batch committed before; its halves are not ended again", path)
            else:
                record = finish_commit(producer, path, record, to_end, timeout_ms)
        _roll_back(producer, options, _ranges_outside(tasks, record.attempts))
    return record


def abort_batch(options: SinkOptions, tasks: Sequence[TaskHalves]) -> None:
    """Roll back the tasks' half messages (those of an attempt a begun commit holds excepted)."""
    if not tasks:
        return
    path = _record_path(tasks)
    with locked(path):
        record = load(path)
        if record is None or not record.commits:
            before = record.attempts if record is not None else frozenset()
            record = BatchRecord(RecordState.ABORTED, before | {task.attempt for task in tasks})
            save(path, record)
    with using_producer(options) as producer:
        _roll_back(producer, options, _ranges_outside(tasks, record.attempts if record.commits else frozenset()))


def _roll_back(producer: AsyncTransactionProducer, options: SinkOptions, ranges: list[HalfRange]) -> None:
    """Best effort: the check rolls back what this does not reach."""
    if not ranges:
        return
    timeout_ms = options.send_timeout_ms
    rollback = TransactionStatus.ROLLBACK
    try:
        cluster.run(end_ranges(producer, [span for span in ranges if span.batched], rollback, timeout_ms), None)
        halves = cluster.run(resolve(producer, [span for span in ranges if not span.batched], timeout_ms), None)
        cluster.run(end_halves(producer, halves, rollback, timeout_ms), None)
    except RocketMQError as exc:
        rows = sum(span.count for span in ranges)
        log.warning("rolling back %d half messages failed (the brokers' checks will): %s", rows, exc)
