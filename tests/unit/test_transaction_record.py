"""The transactional sink's batch record: how a check is answered in each state, its file form, a
record that cannot be read, its directories; the sink's transactional options; the order of ENDs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rocketspark import fileutil
from rocketspark.client.producer.transaction import HalfMessage, TransactionStatus
from rocketspark.errors import ConfigError, TransactionRecordError
from rocketspark.spark.sink import options as sink_options
from rocketspark.spark.sink.options import parse_sink
from rocketspark.spark.sink.transactional import ending, record
from rocketspark.spark.sink.transactional.commit import commit_batch
from rocketspark.spark.sink.transactional.record import BatchRecord, HalfRange, RecordState, load, locked, save
from rocketspark.spark.sink.transactional.sending import TaskHalves
from rocketspark.spark.sink.transactional.writers import TransactionalBatchWriter

COMMIT, ROLLBACK, UNKNOWN = TransactionStatus.COMMIT, TransactionStatus.ROLLBACK, TransactionStatus.UNKNOWN


def test_checks_are_answered_by_state_and_attempt() -> None:
    committing = BatchRecord(RecordState.COMMITTING, frozenset({"a1"}))
    committed = BatchRecord(RecordState.COMMITTED, frozenset({"a1"}))
    aborted = BatchRecord(RecordState.ABORTED, frozenset({"a1"}))
    assert (committing.answer("a1"), committing.answer("b2")) == (UNKNOWN, ROLLBACK)
    # committed: the driver's END of every half message was stored; a check of a1 is about a copy
    # Apache's check wrote back (or raced that END): committing it would store the row twice
    assert (committed.answer("a1"), committed.answer("b2")) == (ROLLBACK, ROLLBACK)
    assert (aborted.answer("a1"), aborted.answer("b2")) == (ROLLBACK, UNKNOWN)  # b2: a later run of the batch


def test_a_record_reads_back_as_written(tmp_path: Path) -> None:
    path = str(tmp_path / "query" / "7.json")
    assert load(path) is None  # no file: no record
    ranges = (HalfRange("a1", "broker-a", 3, 90, 40), HalfRange("a2", "broker-b", 0, 7, 8))
    committing = BatchRecord(RecordState.COMMITTING, frozenset({"a1", "a2"}), ranges, (("Out", "broker-a", 2, 17),))
    save(path, committing)
    assert load(path) == committing
    # records of the version that listed every half message: a finished one still answers checks...
    old = '{"state": "%s", "attempts": ["a1"], "halves": [["Out", "broker-a", 3, 4096, "ID1", 0]]}'
    Path(path).write_text(old % "committed")
    assert load(path) == BatchRecord(RecordState.COMMITTED, frozenset({"a1"}))
    # ...and a begun commit of it, which this version cannot finish, is an error, not "no record"
    Path(path).write_text(old % "committing")
    with pytest.raises(TransactionRecordError, match="before offset ranges"):
        load(path)


@pytest.mark.parametrize("damage", ["not json", "not a record", "not a file"])
def test_a_record_that_cannot_be_read_is_an_error_not_no_record(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "7.json"
    if damage == "not a file":
        path.mkdir()  # read_bytes: IsADirectoryError, an OSError other than "no such file"
    else:
        path.write_text('{"state": "done"}' if damage == "not a record" else "{not json")
    with pytest.raises(TransactionRecordError, match=f"transaction record {path} cannot be read"):
        load(str(path))


def test_a_commit_with_a_record_that_cannot_be_read_fails_before_it_ends_anything(tmp_path: Path) -> None:
    path = tmp_path / "7.json"
    path.write_text("{not json")
    task = TaskHalves("a1", str(path), 1, (HalfRange("a1", "broker-a", 0, 0, 1),))
    # no name server runs at this address: a commit that tried to end anything would fail otherwise
    with pytest.raises(TransactionRecordError, match="cannot be read"):
        commit_batch(parse_sink({**_TXN, "nameserver": "127.0.0.1:1"}), [task])
    assert path.read_text() == "{not json"  # not replaced by a fresh record


def test_new_record_directories_are_made_durable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[Path] = []
    monkeypatch.setattr(fileutil, "fsync_directory", synced.append)
    with locked(str(tmp_path / "log" / "query-id" / "7.json")):
        pass
    assert synced == [tmp_path, tmp_path / "log"]  # each new directory's parent
    synced.clear()
    with locked(str(tmp_path / "log" / "query-id" / "8.json")):
        pass
    assert synced == []


def test_a_transactional_batch_write_needs_txn_app_id(tmp_path: Path) -> None:
    options = parse_sink({"nameserver": "127.0.0.1:9876", "transactional": "true", "transactionLog": str(tmp_path)})
    with pytest.raises(ConfigError, match="transactional=true needs the options txnAppId and txnVersion"):
        TransactionalBatchWriter(options)
    named = parse_sink({**_TXN, "transactionLog": str(tmp_path), "txnAppId": "nightly", "txnVersion": "3"})
    assert TransactionalBatchWriter(named).record_path == str(tmp_path / "txn-nightly-3.json")


_TXN = {"nameserver": "127.0.0.1:9876", "transactional": "true"}


def test_how_long_a_batch_may_stay_open() -> None:
    assert parse_sink(_TXN).transaction_max_open_s == sink_options.DEFAULT_TRANSACTION_MAX_OPEN_S
    assert parse_sink({**_TXN, "transactionMaxOpenSeconds": "0"}).transaction_max_open_s == 0
    with pytest.raises(ConfigError, match="transactionMaxOpenSeconds"):
        parse_sink({**_TXN, "transactionMaxOpenSeconds": "-1"})


class _Producer:
    """Answers each END after a delay that shrinks with the half message's offset, as a broker with
    many threads might: ENDs sent at once would finish in reverse order."""

    def __init__(self) -> None:
        self.ended: list[HalfMessage] = []
        self.in_flight: dict[int, int] = {}

    async def end_transaction(
        self, half: HalfMessage, status: TransactionStatus, *, wait: bool = False, timeout_ms: int | None = None
    ) -> None:
        self.in_flight[half.queue_id] = self.in_flight.get(half.queue_id, 0) + 1
        assert self.in_flight[half.queue_id] == 1, "two ENDs of one queue in flight"
        await asyncio.sleep(0.001 * (20 - half.queue_offset % 20))
        self.ended.append(half)
        self.in_flight[half.queue_id] -= 1


def test_ends_of_one_queue_are_stored_in_the_order_of_its_half_messages() -> None:
    halves = [HalfMessage("Out", "broker-a", offset, offset, f"ID{offset}", offset % 3) for offset in range(60)]
    producer = _Producer()
    asyncio.run(ending.end_halves(producer, [halves], COMMIT))  # type: ignore[arg-type]
    for queue_id in range(3):
        assert [h for h in producer.ended if h.queue_id == queue_id] == [h for h in halves if h.queue_id == queue_id]


def test_a_stream_keeps_the_records_of_its_last_batches(tmp_path: Path) -> None:
    query = tmp_path / "query-id"
    for batch in range(8):
        save(str(query / f"{batch}.json"), BatchRecord(RecordState.COMMITTED, frozenset({"a"})))
        Path(f"{query / f'{batch}.json'}.lock").touch()
    assert record.forget_old_batches(str(query / "7.json"), retained=3) == 5
    assert sorted(p.name for p in query.iterdir()) == [
        "5.json",
        "5.json.lock",
        "6.json",
        "6.json.lock",
        "7.json",
        "7.json.lock",
    ]
    assert record.forget_old_batches(str(query / "7.json"), retained=3) == 0
