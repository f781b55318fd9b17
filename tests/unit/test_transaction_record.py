"""The transactional sink's batch record: how a check is answered in each state, and its file form."""

from __future__ import annotations

from pathlib import Path

from rocketspark.client.producer.transaction import HalfMessage, TransactionStatus
from rocketspark.spark.sink.transactional.record import BatchRecord, RecordState, load, save

COMMIT, ROLLBACK, UNKNOWN = TransactionStatus.COMMIT, TransactionStatus.ROLLBACK, TransactionStatus.UNKNOWN


def test_checks_are_answered_by_state_and_attempt() -> None:
    committing = BatchRecord(RecordState.COMMITTING, frozenset({"a1"}))
    committed = BatchRecord(RecordState.COMMITTED, frozenset({"a1"}))
    aborted = BatchRecord(RecordState.ABORTED, frozenset({"a1"}))
    assert (committing.answer("a1"), committing.answer("b2")) == (UNKNOWN, ROLLBACK)
    assert (committed.answer("a1"), committed.answer("b2")) == (COMMIT, ROLLBACK)
    assert (aborted.answer("a1"), aborted.answer("b2")) == (ROLLBACK, UNKNOWN)  # b2: a later run of the batch


def test_a_record_reads_back_as_written(tmp_path: Path) -> None:
    path = str(tmp_path / "query" / "7.json")
    assert load(path) is None
    halves = (HalfMessage("Out", "broker-a", 3, 4096, "ID1"), HalfMessage("Out", "broker-b", 0, 0, "ID2"))
    record = BatchRecord(RecordState.COMMITTING, frozenset({"a1", "a2"}), halves)
    save(path, record)
    assert load(path) == record
    Path(path).write_text("{not json")
    assert load(path) is None  # unreadable: the check answers unknown
