"""Finishing a begun commit: the driver's own, a restarted driver's, or a check's for a driver that is gone.

A `committing` record lists where the half messages of the batch's committing attempts are and, per
queue of those sent alone, the offset its queue had before the first END (record.py). Finishing it
ends the ranges of batches again (the bundled broker that took them commits each half message once)
and, in each queue's order, the half messages sent alone whose row is not in their queue yet
(stored.py: an Apache broker stores every END it gets, so a row already committed must not be ended
again), then marks the record `committed`.
The caller holds the record's lock.

A check of a half message whose record says `committing`, written at least `ORPHAN_COMMIT_AGE_S`
ago, finishes the commit from the checked producer's process (`finish_orphan`) when no one holds
the record's lock: a driver that is committing holds it from its decision to its last END, so one
that does not is gone, and without this a query that is never run again would leave its batch
partly visible.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence

from rocketspark.client.producer.transaction import AsyncTransactionProducer, HalfMessage, TransactionStatus
from rocketspark.spark import cluster
from rocketspark.spark.sink.transactional.ending import end_halves, end_ranges
from rocketspark.spark.sink.transactional.ranges import resolve
from rocketspark.spark.sink.transactional.record import (
    BatchRecord,
    HalfRange,
    RecordState,
    load,
    locked_if_free,
    save,
)
from rocketspark.spark.sink.transactional.storage import records_of
from rocketspark.spark.sink.transactional.stored import not_stored_yet

log = logging.getLogger(__name__)

#: how old a `committing` record must be before a check finishes its commit
ORPHAN_COMMIT_AGE_S = 60.0


def finish_commit(
    producer: AsyncTransactionProducer,
    path: str,
    record: BatchRecord,
    halves: Sequence[Sequence[HalfMessage]] | None = None,
    timeout_ms: int | None = None,
) -> BatchRecord:
    """End the record's batched ranges by range and `halves` (by default those of its ranges of half
    messages sent alone not in their queues yet), and mark the record committed; the record as
    saved. Each request within `timeout_ms` (default: the producer's)."""
    singles = [span for span in record.ranges if not span.batched]
    if halves is None:
        listed = cluster.run(resolve(producer, singles, timeout_ms), None)
        halves = cluster.run(not_stored_yet(producer, producer.group, listed, record.starts, timeout_ms), None)
        log.warning(
            "transaction record %s: finishing the commit begun before (%d of %d rows sent alone not in their "
            "queues yet; %d ranges of batches ended again, which stores none twice)",
            path,
            sum(len(group) for group in halves),
            sum(len(group) for group in listed),
            len(record.ranges) - len(singles),
        )
    batched = [span for span in record.ranges if span.batched]
    cluster.run(_end_all(producer, batched, halves, timeout_ms), None)
    committed = dataclasses.replace(record, state=RecordState.COMMITTED)
    save(path, committed)
    return committed


async def _end_all(
    producer: AsyncTransactionProducer,
    ranges: Sequence[HalfRange],
    halves: Sequence[Sequence[HalfMessage]],
    timeout_ms: int | None,
) -> None:
    """Commit ranges of batches and half messages sent alone side by side; the first failure."""
    results = await asyncio.gather(
        end_ranges(producer, ranges, TransactionStatus.COMMIT, timeout_ms),
        end_halves(producer, halves, TransactionStatus.COMMIT, timeout_ms),
        return_exceptions=True,
    )
    for result in results:
        if isinstance(result, BaseException):
            raise result


def finish_orphan(producer: AsyncTransactionProducer, path: str) -> bool:
    """Finish the commit of the `committing` record at `path` if its driver is gone (above); whether
    it was finished here."""
    version = records_of(path).version(path)
    if version is None or time.time() - version[0] / 1e9 < ORPHAN_COMMIT_AGE_S:
        return False
    with locked_if_free(path) as held:
        if not held:
            return False  # a driver is committing it
        record = load(path)
        if record is None or record.state is not RecordState.COMMITTING:
            return False
        log.warning("transaction record %s: its driver is gone mid-commit; a check finishes it", path)
        finish_commit(producer, path, record)
        return True
